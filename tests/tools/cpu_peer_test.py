"""bench/cpu_peer's Python, offline and without CTranslate2 (plain Python; numpy only for the
safetensors reader, skipped without it):

- ct2_peer.py report: outputs compared with gecd's as gecd answers them (a text of only
  whitespace is its own answer, a refused one is empty), rates per round, the backend named;
- ct2_peer.py perf-groups: samples summed by process (threads mapped to their process) and by
  part of the engine's work, batch sizes from /metrics;
- profile_table.py: per concurrency, the least disturbed run (shortest step) is kept;
- ct2_peer.read_safetensors: BF16, F16 and F32 tensors widened to f32 exactly.
"""

import contextlib
import importlib.util
import io
import json
import os
import struct
import sys
import tempfile
import types
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEER = os.path.join(ROOT, "bench", "cpu_peer")


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(PEER, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ct2_peer = load("ct2_peer")
profile_table = load("profile_table")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def run(fn, **kwargs):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn(types.SimpleNamespace(**kwargs))
    return out.getvalue()


class ReportTest(unittest.TestCase):
    def test_compares_as_gecd_answers_and_names_the_backend(self):
        with tempfile.TemporaryDirectory() as d:
            prompts = [{"tokens": [1, 5, 3], "max_new_tokens": 8}, {"unchanged": True},
                       {"error": "too long"}, {"tokens": [1, 6, 3], "max_new_tokens": 8}]
            write(os.path.join(d, "prompts.jsonl"), "".join(json.dumps(p) + "\n" for p in prompts))
            write(os.path.join(d, "texts.txt"), "A b.\n  \nx\nC d.\n")
            gecd = ["A b.", "  ", "", "C d."]
            # run.sh's rows: the reference, then one whose last output differs.
            write(os.path.join(d, "gecd-rows.txt"),
                  "f32\tf32 OpenBLAS\t\nint8\tint8 oneDNN\tOMP_WAIT_POLICY=passive\n")
            for tag, rates, outputs in (("f32", (10.0, 12.0), gecd),
                                        ("int8", (30.0, 34.0), gecd[:3] + ["C e."])):
                for r, rate in zip((1, 2), rates):
                    write(os.path.join(d, f"gecd-eval-{tag}-r{r}.json"), json.dumps({
                        "throughput": {"model": {"sentences_per_s": rate}},
                        "outputs": {"jfleg": [{"model": g} for g in outputs]}}))
            for ct, second in (("int8", "C e."), ("float32", "C d.")):
                write(os.path.join(d, f"ct2-{ct}-r1.json"), json.dumps({
                    "ctranslate2": "4.8.5", "batch": 128, "threads": 2, "req_per_s": 20.0,
                    "generated_tokens": 4, "hit_max_new_tokens": 0}))
                # decode writes a line for every prompt (empty ids: empty text)
                write(os.path.join(d, f"ct2-{ct}.txt.jsonl"),
                      "".join(json.dumps(t) + "\n" for t in ["A b.", "", "", second]))
                kind = "SGEMM" if ct == "float32" else "GEMM_S8"
                write(os.path.join(d, f"ct2-{ct}-r1.log"),
                      f"[info]  - Selected ISA: AVX2\n[info]  - {kind} backend: MKL (packed)\n")
            write(os.path.join(d, "gecd-findmax-int8.json"), json.dumps({"slo_p99_s": 1.0, "max_qps": 7.5}))
            write(os.path.join(d, "gecd-findmax-int8.label"), "--set engine.quantization=int8\n")
            text = run(ct2_peer.report, dir=d, diffs=1)
        self.assertIn("int8 (MKL, AVX2)", text)
        self.assertRegex(text, r"int8 .*\| 20\.0 \| 20\.0 \| 3 / 4 \|")
        self.assertRegex(text, r"float32 .*\| 4 / 4 \|")
        self.assertIn("| 10.0 / 12.0 | 11.0 | (reference) |", text)
        self.assertIn("gecd eval, in-process engine, int8 oneDNN, offline, OMP_WAIT_POLICY=passive | "
                      "30.0 / 34.0 | 32.0 | 3 / 4 (4 / 4 with CTranslate2 int8's) |", text)
        self.assertIn("gecd serve --set engine.quantization=int8, gecd-load --find-max, p99 < 1 s | "
                      "7.5 | 7.5 |", text)
        self.assertIn("int8 vs its float32: 3 / 4 identical", text)
        self.assertIn("2 run through the model", text)
        self.assertIn("int8 differs, line 4", text)


class PerfGroupsTest(unittest.TestCase):
    def test_sums_by_process_and_part(self):
        perf = """# header
    40.00%      11:gecd: engine    libopenblasp-r0.3.21.so  [.] sgemm_kernel_HASWELL
    10.00%      12:exe             libopenblasp-r0.3.21.so  [.] sgemm_incopy_HASWELL
    10.00%      12:exe             [kernel.kallsyms]        [k] do_sched_yield
    10.00%      11:gecd: engine    gecd                     [.] gecd::engine::CpuBackend::Attention
     5.00%      11:gecd: engine    gecd                     [.] gecd::ipc::Ring::Pop
     5.00%      11:gecd: engine    [kernel.kallsyms]        [k] futex_wait
    20.00%      21:gecd: worker 0  gecd                     [.] grpc::Something
"""
        metrics = 'gecd_batch_size_bucket{le="1"} 3\ngecd_batch_size_bucket{le="2"} 4\n' \
                  'gecd_batch_size_bucket{le="+Inf"} 4\ngecd_batch_size_sum 5\ngecd_batch_size_count 4\n'
        with tempfile.TemporaryDirectory() as d:
            write(os.path.join(d, "perf.txt"), perf)
            write(os.path.join(d, "threads.txt"), "11 gecd: engine\n12 gecd: engine\n21 gecd: worker 0\n")
            write(os.path.join(d, "metrics.txt"), metrics)
            text = run(ct2_peer.perf_groups, perf=os.path.join(d, "perf.txt"),
                       threads=os.path.join(d, "threads.txt"),
                       metrics=os.path.join(d, "metrics.txt"))
        self.assertIn("| engine | 80.0% |", text)
        self.assertIn("| worker | 20.0% |", text)
        self.assertRegex(text, r"matmuls: OpenBLAS sgemm .* \| 62\.5% \|")
        self.assertRegex(text, r"\| attention \| 12\.5% \|")
        self.assertRegex(text, r"sched_yield .* \| 12\.5% \|")
        self.assertRegex(text, r"ring I/O .* \| 6\.2% \|")
        self.assertRegex(text, r"other syscalls.* \| 6\.2% \|")
        self.assertIn("engine steps: 4, mean batch 1.2 sequences; <= 1: 75%, <= 2: 25%", text)


class ProfileTableTest(unittest.TestCase):
    def test_keeps_the_shortest_step_per_concurrency(self):
        def block(c, step, share):
            return (f"### concurrency {c}: 10 sentences, 5 steps, 4.0 tokens and 2.0 sampled rows a "
                    f"step (max 2), {step} ms a step, 9.0 sentences/s, 90 generated tokens/s\n\n"
                    "| stage | ms/step | share | GFLOP/s | same sgemm alone, GFLOP/s |\n"
                    "|---|---:|---:|---:|---:|\n"
                    f"| qkv | 1.000 | {share}% | 20.0 | 30.0 |\n"
                    "| attention | 0.500 | 5.0% | | |\n"
                    "| **whole step** | 5.000 | 100% | 10.0 | |\n")
        with tempfile.TemporaryDirectory() as d:
            a = os.path.join(d, "a.txt")
            write(a, "=== env: none; rep 1\n" + block(2, 6.0, 11.0) + block(8, 9.0, 12.0)
                  + "=== env: X=1; rep 1\n" + block(2, 4.0, 13.0))
            b = os.path.join(d, "b.txt")
            write(b, "=== env: none; rep 2\n" + block(2, 5.0, 21.0) + block(8, 10.0, 22.0))
            runs = profile_table.parse([a, b])
            self.assertEqual(runs[("none", 2)][0], 5.0)
            self.assertEqual(runs[("none", 8)][0], 9.0)
            self.assertEqual(runs[("X=1", 2)][0], 4.0)
            sys.argv = ["profile_table.py", a, b]
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                profile_table.main()
        text = out.getvalue()
        self.assertIn("| qkv | 21.0% (20.0 / 30.0) | 12.0% (20.0 / 30.0) |", text)
        self.assertIn("| attention | 5.0% | 5.0% |", text)
        self.assertIn("| **whole step** | 100% (10.0) | 100% (10.0) |", text)
        self.assertIn("#### OpenBLAS environment: X=1", text)


class SafetensorsTest(unittest.TestCase):
    def test_widens_bf16_f16_f32(self):
        try:
            import numpy as np
        except ImportError:
            self.skipTest("numpy not installed (bench/cpu_peer/run.sh's venv has it)")
        values = [1.0, -2.5, 0.15625]
        bf16 = b"".join(struct.pack("<f", v)[2:] for v in values)  # exact in bf16
        f16 = np.array(values, dtype="<f2").tobytes()
        f32 = np.array(values, dtype="<f4").tobytes()
        header = {"__metadata__": {"format": "pt"},
                  "a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
                  "b": {"dtype": "F16", "shape": [1, 3], "data_offsets": [6, 12]},
                  "c": {"dtype": "F32", "shape": [3, 1], "data_offsets": [12, 24]}}
        raw = json.dumps(header).encode()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "model.safetensors")
            with open(path, "wb") as f:
                f.write(struct.pack("<Q", len(raw)) + raw + bf16 + f16 + f32)
            t = ct2_peer.read_safetensors(path)
        self.assertEqual(t["a"].dtype, np.float32)
        self.assertEqual(t["a"].tolist(), values)
        self.assertEqual(t["b"].shape, (1, 3))
        self.assertEqual(t["b"].ravel().tolist(), values)
        self.assertEqual(t["c"].ravel().tolist(), values)


if __name__ == "__main__":
    unittest.main()
