#!/usr/bin/python3
"""End-to-end client for a running gecd: python3 client_test.py HOST:PORT [unittest args].

Written with Debian's python3-grpcio and python3-protobuf; the stubs are generated at start
from proto/gecd/v1/grammar.proto (and the health/reflection subsets in protos/, named so as
not to shadow grpcio's own `grpc` package, and protos/grammar_bytes.proto, the request as
older clients declared it, `text` as bytes) into a temporary directory. Checks that `text`
takes a plain str, that bytes clients still work, that applying the returned edits to the
input yields corrected_text, that streams answer every sentence by id (and, asked with
stream_sentences, each sentence of a text before the text), that invalid input
(invalid UTF-8 included, as a bytes client sends it) is INVALID_ARGUMENT, and that the health
and reflection services answer.
Exit status: 0 passed, 1 failed, 77 skipped (grpc or the protoc plugin missing).
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))
SENTENCES = [
    "She go to school every days.",
    "I has a apple , and he have two.",
    "Their going too the park tomorrow!",
    "café naïve résumé — déjà vu",
    "No errors here.",
]
TIMEOUT_S = 60  # generous: a loaded 2-core machine


def generate_stubs(out_dir):
    plugin = "/usr/bin/grpc_python_plugin"
    protos = [
        (os.path.join(SOURCE_DIR, "proto"), "gecd/v1/grammar.proto"),
        (os.path.join(HERE, "protos"), "health.proto"),
        (os.path.join(HERE, "protos"), "reflection.proto"),
        (os.path.join(HERE, "protos"), "grammar_bytes.proto"),
    ]
    for include, proto in protos:
        subprocess.run(
            ["protoc", f"--proto_path={include}", f"--python_out={out_dir}",
             f"--grpc_python_out={out_dir}", f"--plugin=protoc-gen-grpc_python={plugin}",
             os.path.join(include, proto)],
            check=True)
    sys.path.insert(0, out_dir)


def apply_edits(text, edits):
    """Applies edits (byte offsets into the UTF-8 text) and returns the new text."""
    source = text.encode("utf-8")
    out = bytearray()
    pos = 0
    for e in edits:
        assert pos <= e.start <= e.end <= len(source), (pos, e.start, e.end, len(source))
        out += source[pos:e.start] + e.replacement.encode("utf-8")
        pos = e.end
    out += source[pos:]
    return out.decode("utf-8")


class GecdClientTest(unittest.TestCase):
    address = None

    @classmethod
    def setUpClass(cls):
        import grpc
        from gecd.v1 import grammar_pb2_grpc
        cls.grpc = grpc
        cls.channel = grpc.insecure_channel(cls.address)
        grpc.channel_ready_future(cls.channel).result(timeout=TIMEOUT_S)
        cls.stub = grammar_pb2_grpc.GrammarCorrectionStub(cls.channel)

    def bytes_client_correct(self, text_bytes):
        """Correct as a client whose stubs declare `text` bytes (the API before it was a
        string): the same method, the old request message."""
        import grammar_bytes_pb2
        from gecd.v1 import grammar_pb2
        correct = self.channel.unary_unary(
            "/gecd.v1.GrammarCorrection/Correct",
            request_serializer=grammar_bytes_pb2.CorrectRequest.SerializeToString,
            response_deserializer=grammar_pb2.CorrectResponse.FromString)
        return correct(grammar_bytes_pb2.CorrectRequest(text=text_bytes, request_id="old"),
                       timeout=TIMEOUT_S)

    def test_text_is_a_plain_str(self):
        from gecd.v1 import grammar_pb2
        text = "She go to school yesterday."
        response = self.stub.Correct(grammar_pb2.CorrectRequest(text=text), timeout=TIMEOUT_S)
        self.assertEqual(apply_edits(text, response.edits), response.corrected_text)

    def test_bytes_clients_still_work(self):
        from gecd.v1 import grammar_pb2
        text = "She go to school yesterday."
        # Old code against new stubs: protobuf takes UTF-8 bytes for a string field.
        new_stubs = self.stub.Correct(grammar_pb2.CorrectRequest(text=text.encode()),
                                      timeout=TIMEOUT_S)
        # Old stubs: `text` declared bytes; identical on the wire.
        old_stubs = self.bytes_client_correct(text.encode())
        self.assertEqual(old_stubs.request_id, "old")
        self.assertEqual(old_stubs.corrected_text, new_stubs.corrected_text)
        self.assertEqual(apply_edits(text, old_stubs.edits), old_stubs.corrected_text)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()

    def test_edits_applied_to_the_input_give_the_correction(self):
        from gecd.v1 import grammar_pb2
        for text in SENTENCES:
            response = self.stub.Correct(
                grammar_pb2.CorrectRequest(text=text, request_id="id-" + text),
                timeout=TIMEOUT_S)
            self.assertEqual(response.request_id, "id-" + text)
            self.assertEqual(apply_edits(text, response.edits), response.corrected_text)
            self.assertGreater(response.prompt_tokens, 0)

    def test_stream_answers_every_sentence_by_id(self):
        from gecd.v1 import grammar_pb2
        requests = [grammar_pb2.CorrectRequest(text=t, request_id=str(i))
                    for i, t in enumerate(SENTENCES)]
        responses = list(self.stub.CorrectStream(iter(requests), timeout=TIMEOUT_S))
        self.assertEqual(sorted(r.request_id for r in responses),
                         sorted(str(i) for i in range(len(SENTENCES))))
        for r in responses:
            self.assertEqual(r.status.code, 0, r.status.message)
            self.assertEqual(apply_edits(SENTENCES[int(r.request_id)], r.edits), r.corrected_text)

    def test_stream_sentences_answers_each_sentence_then_the_text(self):
        """stream_sentences: each sentence's answer (offsets in Python str indices, the code
        points unit) before its text's final answer, which it agrees with."""
        from gecd.v1 import grammar_pb2
        # Under 100 characters: the in-process worker's server.max_input_chars.
        texts = [SENTENCES[0] + " " + SENTENCES[1],
                 "No errors here. " + SENTENCES[0] + "\n\n" + SENTENCES[3]]
        requests = [grammar_pb2.CorrectRequest(
            text=t, request_id=str(i), stream_sentences=True,
            offset_unit=grammar_pb2.OFFSET_UNIT_CODE_POINTS) for i, t in enumerate(texts)]
        parts = {str(i): {} for i in range(len(texts))}
        finals = {}
        for r in self.stub.CorrectStream(iter(requests), timeout=TIMEOUT_S):
            self.assertNotIn(r.request_id, finals, "a response after its text's final one")
            if r.HasField("sentence_answer"):
                a = r.sentence_answer
                self.assertEqual(r.corrected_text, "")
                self.assertNotIn(a.index, parts[r.request_id])
                parts[r.request_id][a.index] = a
            else:
                self.assertEqual(r.status.code, 0, r.status.message)
                finals[r.request_id] = r
        self.assertEqual(sorted(finals), sorted(parts))
        for rid, final in finals.items():
            text = texts[int(rid)]
            self.assertEqual(len(parts[rid]), len(final.sentences))
            rebuilt, at = "", 0
            for i, sentence in enumerate(final.sentences):
                a = parts[rid][i]
                self.assertEqual(a.sentence_count, len(final.sentences))
                self.assertEqual(a.sentence, sentence)
                self.assertEqual(list(a.edits), [e for e in final.edits if e.sentence == i])
                rebuilt += text[at:a.sentence.start] + a.corrected
                at = a.sentence.end
            self.assertEqual(rebuilt + text[at:], final.corrected_text)

    def test_empty_text_is_invalid_argument(self):
        from gecd.v1 import grammar_pb2
        with self.assertRaises(self.grpc.RpcError) as caught:
            self.stub.Correct(grammar_pb2.CorrectRequest(text=""), timeout=TIMEOUT_S)
        self.assertEqual(caught.exception.code(), self.grpc.StatusCode.INVALID_ARGUMENT)

    def test_invalid_utf8_is_invalid_argument(self):
        # The str stubs cannot even build such a request; a bytes client can send it, and the
        # server (not its protobuf runtime) must refuse it.
        from gecd.v1 import grammar_pb2
        with self.assertRaises(ValueError):
            grammar_pb2.CorrectRequest(text=b"caf\xc3 ok")
        with self.assertRaises(self.grpc.RpcError) as caught:
            self.bytes_client_correct(b"caf\xc3 ok")
        self.assertEqual(caught.exception.code(), self.grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("UTF-8", caught.exception.details())

    def test_health_is_serving(self):
        import health_pb2
        import health_pb2_grpc
        stub = health_pb2_grpc.HealthStub(self.channel)
        response = stub.Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S)
        self.assertEqual(response.status, health_pb2.HealthCheckResponse.SERVING)

    def test_reflection_describes_the_service(self):
        from google.protobuf import descriptor_pb2
        import reflection_pb2
        import reflection_pb2_grpc
        stub = reflection_pb2_grpc.ServerReflectionStub(self.channel)
        requests = [
            reflection_pb2.ServerReflectionRequest(list_services="*"),
            reflection_pb2.ServerReflectionRequest(
                file_containing_symbol="gecd.v1.GrammarCorrection"),
        ]
        listed, described = list(stub.ServerReflectionInfo(iter(requests), timeout=TIMEOUT_S))
        names = [s.name for s in listed.list_services_response.service]
        self.assertIn("gecd.v1.GrammarCorrection", names)
        self.assertIn("grpc.health.v1.Health", names)
        files = [descriptor_pb2.FileDescriptorProto.FromString(b)
                 for b in described.file_descriptor_response.file_descriptor_proto]
        services = {f"{f.package}.{s.name}": [m.name for m in s.method]
                    for f in files for s in f.service}
        self.assertEqual(services.get("gecd.v1.GrammarCorrection"), ["Correct", "CorrectStream"])
        # Reflection describes the public API: `text` is a string there.
        requests = {f"{f.package}.{m.name}": m for f in files for m in f.message_type}
        text = [fd for fd in requests["gecd.v1.CorrectRequest"].field if fd.name == "text"][0]
        self.assertEqual(text.type, descriptor_pb2.FieldDescriptorProto.TYPE_STRING)


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import grpc  # noqa: F401
    except ImportError:
        print("SKIP: python3-grpcio is not installed", file=sys.stderr)
        return 77
    if not os.path.exists("/usr/bin/grpc_python_plugin"):
        print("SKIP: grpc_python_plugin is not installed", file=sys.stderr)
        return 77
    GecdClientTest.address = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="gecd-e2e-") as stubs:
        generate_stubs(stubs)
        program = unittest.main(argv=[sys.argv[0]] + sys.argv[2:], exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
