#!/usr/bin/python3
"""Typing sessions against a running gecd: what the sentence cache saves (issue 27, point 6).

    python3 bench/whole_text/typing_session.py HOST:PORT [--sessions 20] [--edits 10]
        [--paragraphs 3] [--sentences 5] [--jfleg DIR] [--seed 1]

A writing assistant sends the whole text field again after every pause in typing. Each session
here is a text of --paragraphs paragraphs of --sentences sentences (JFLEG dev sources, detokenized
roughly), sent once, then re-sent after each of --edits simulated edits (insert a word, delete a
word, fix a word: one sentence changes each time). The same sequence of texts runs twice: with
the cache (the server's default) and with `cache: false`. Reports the share of sentences served
from the cache and the engine tokens (prompt + output) per request either way. Needs Debian's
python3-grpcio and protoc with grpc_python_plugin; the server should run with
server.workers=1 (workers do not share their caches).
"""

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))


def stubs(out_dir):
    include = os.path.join(SOURCE_DIR, "proto")
    subprocess.run(
        ["protoc", f"--proto_path={include}", f"--python_out={out_dir}",
         f"--grpc_python_out={out_dir}", "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin",
         os.path.join(include, "gecd/v1/grammar.proto")], check=True)
    sys.path.insert(0, out_dir)


def detokenize(line):
    line = re.sub(r" ([.,!?;:'])", r"\1", line.strip())
    line = re.sub(r" n't", "n't", line)
    return line[:1].upper() + line[1:]


def edit(rng, sentence):
    words = sentence.split(" ")
    kind = rng.choice(["insert", "delete", "fix"])
    i = rng.randrange(len(words))
    if kind == "insert" or len(words) < 3:
        words.insert(i, rng.choice(["really", "very", "also", "just"]))
    elif kind == "delete" and i > 0:
        del words[i]
    else:
        words[i] = words[i][::-1] if len(words[i]) > 3 else words[i] + "s"
    return " ".join(words)


def sessions(args):
    with open(os.path.join(args.jfleg, "dev.src"), encoding="utf-8") as f:
        lines = [detokenize(l) for l in f if l.strip()]
    rng = random.Random(args.seed)
    per_text = args.paragraphs * args.sentences
    out = []
    for s in range(args.sessions):
        start = (s * per_text) % (len(lines) - per_text)
        sentences = lines[start:start + per_text]
        texts = []
        for e in range(args.edits + 1):
            if e > 0:
                i = rng.randrange(len(sentences))
                sentences[i] = edit(rng, sentences[i])
            paragraphs = [" ".join(sentences[p * args.sentences:(p + 1) * args.sentences])
                          for p in range(args.paragraphs)]
            texts.append("\n\n".join(paragraphs))
        out.append(texts)
    return out


def run(stub, pb, all_texts, cache):
    requests = sentences = cached = tokens = 0
    for texts in all_texts:
        for text in texts:
            response = stub.Correct(pb.CorrectRequest(text=text, cache=cache), timeout=120)
            requests += 1
            sentences += len(response.sentences)
            cached += sum(1 for s in response.sentences if s.cached)
            tokens += response.prompt_tokens + response.output_tokens
    return requests, sentences, cached, tokens


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--edits", type=int, default=10)
    parser.add_argument("--paragraphs", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=5)
    parser.add_argument("--jfleg", default=os.path.join(SOURCE_DIR, "..", "shared", "data", "jfleg"))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    import grpc  # Debian's python3-grpcio
    with tempfile.TemporaryDirectory() as tmp:
        stubs(tmp)
        from gecd.v1 import grammar_pb2 as pb, grammar_pb2_grpc as pb_grpc
        stub = pb_grpc.GrammarCorrectionStub(grpc.insecure_channel(args.target))
        texts = sessions(args)
        # Without the cache first, so that the cached run does not find the texts already there
        # from it (cache: false neither reads nor writes the cache).
        r0, s0, c0, t0 = run(stub, pb, texts, cache=False)
        r1, s1, c1, t1 = run(stub, pb, texts, cache=True)
    print(f"{args.sessions} sessions x {args.edits + 1} requests, "
          f"{args.paragraphs}x{args.sentences} sentences a text")
    print(f"cache off: {r0} requests, {s0} sentences, {t0 / r0:.1f} engine tokens/request")
    print(f"cache on:  {r1} requests, {s1} sentences, {c1} from the cache "
          f"({100.0 * c1 / s1:.1f}%), {t1 / r1:.1f} engine tokens/request "
          f"({t0 / max(t1, 1):.1f}x fewer)")


if __name__ == "__main__":
    main()
