#!/usr/bin/python3
"""Cold-start benchmark: exec of `gecd serve` -> /readyz 200 -> first answered request, with a
warm and with a dropped page cache, and the start-up breakdown each process logs.

  python3 bench/cold_start.py [--gecd build/gecd] [--config configs/gecd.yaml]
                              [--rounds 5] [--cache warm,cold] [--requests 1000] [--json FILE]
  python3 bench/cold_start.py --image localhost/gecd:cpu [--requests 1000]

Each round starts the daemon on free 127.0.0.1 ports, polls /readyz every 2 ms, then sends the
README's request (waiting for the channel to be ready) and stops the daemon. "cold" drops the
page cache first: /proc/sys/vm/drop_caches where it is writable (root), else
posix_fadvise(DONTNEED) over the files start-up reads (the binary, its libraries, the model
directory, the dictionaries, the config), which evicts the pages no other process maps.

With --requests N (after the cold rounds), one more cold start is followed by N requests, and
the share of each of those files resident in the page cache is read with mincore(2): what
start-up and the first N requests read, the part of an image a lazily-pulled container fetches.
With --image, that residency is measured for a container of the image (podman, as
scripts/image_check.sh runs it) over every file of the image's layers.

Needs Debian's python3-grpcio and protobuf-compiler-grpc (run by /usr/bin/python3).
"""

import argparse
import ctypes
import ctypes.util
import json
import mmap
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
import client_test  # noqa: E402  (stub generation)
import gecd_daemon  # noqa: E402  (free ports, HTTP GET)

README_TEXT = "She go to school yesterday and they was happy."
# "... start-up: exec→main 21 ms (20 ms CPU), config 2 ms (2 ms CPU); 633 ms since exec (...)"
STARTUP_LINE = re.compile(
    r"\[(supervisor|engine|worker \d+) \d+\] .*start-up: (.*); (\d+) ms \((\d+) ms CPU\) since")
PHASE = re.compile(r"^(.*) (\d+) ms \((\d+) ms CPU\)$")


def phases_of(log_text):
    """{process: {phase: (wall ms, CPU ms), "total": (...)}} from the start-up lines of a log."""
    out = {}
    for m in STARTUP_LINE.finditer(log_text):
        process, phases = m.group(1), m.group(2)
        parsed = {}
        for part in phases.split(", "):
            p = PHASE.match(part)
            if not p:
                raise ValueError(f"not a start-up phase: {part!r} in {m.group(0)!r}")
            parsed[p.group(1)] = (int(p.group(2)), int(p.group(3)))
        parsed["total"] = (int(m.group(3)), int(m.group(4)))
        out[process] = parsed
    return out


def start_up_files(gecd, config_path, model_dir):
    """The files a start-up reads: the binary, its libraries (ldd), the model directory, the
    Hunspell dictionary and the config."""
    files = [os.path.realpath(gecd), config_path]
    ldd = subprocess.run(["ldd", gecd], capture_output=True, text=True).stdout
    files += [os.path.realpath(m) for m in re.findall(r"=> (/\S+)", ldd)]
    shim = os.path.join(os.path.dirname(gecd), "libgecd_sentencepiece_shim.so")
    if os.path.exists(shim):
        files.append(shim)
    files += [os.path.join(model_dir, f) for f in sorted(os.listdir(model_dir))]
    files += ["/usr/share/hunspell/en_US.aff", "/usr/share/hunspell/en_US.dic"]
    return [f for f in dict.fromkeys(files) if os.path.isfile(f)]


def drop_page_cache(files):
    """'drop_caches' or 'fadvise': how the page cache was dropped."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "drop_caches"
    except OSError:
        for path in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        return "fadvise"


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def resident_bytes(path):
    """(resident, size) in bytes of a file's pages in the page cache (mincore over a mapping)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0, 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = ctypes.create_string_buffer(pages)
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            resident = sum(b & 1 for b in vec.raw)
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)
    return min(size, resident * mmap.PAGESIZE), size


def image_files(image):
    """Every regular file of the image's layers (podman's overlay directories)."""
    dirs = subprocess.run(
        ["podman", "image", "inspect", image, "--format",
         "{{.GraphDriver.Data.LowerDir}}:{{.GraphDriver.Data.UpperDir}}"],
        check=True, capture_output=True, text=True).stdout.strip()
    files = []
    for d in filter(None, dirs.split(":")):
        for top, _, names in os.walk(d):
            files += [os.path.join(top, n) for n in names
                      if os.path.isfile(os.path.join(top, n))
                      and not os.path.islink(os.path.join(top, n))]
    return files


class Run:
    """One `gecd serve` start (on the host, or in a container of --image), timed from just
    before its exec."""

    def __init__(self, args, stubs):
        self.args, self.stubs = args, stubs
        self.grpc_port, self.metrics_port = gecd_daemon.free_port(), gecd_daemon.free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="gecd-cold-start-", suffix=".log")

    def command(self):
        if self.args.image:
            # SIGTERM to podman in the foreground reaches the container's supervisor.
            return ["podman", "--runtime", "runc", "run", "--rm",
                    "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096",
                    "-p", f"127.0.0.1:{self.grpc_port}:50051",
                    "-p", f"127.0.0.1:{self.metrics_port}:9100", self.args.image,
                    "serve", "--config", "/opt/gecd/configs/gecd.yaml",
                    *sum((["--set", s] for s in self.args.set), [])]
        return [self.args.gecd, "serve", "--config", self.args.config,
                "--set", f"server.listen=127.0.0.1:{self.grpc_port}",
                "--set", f"server.metrics_listen=127.0.0.1:{self.metrics_port}",
                *sum((["--set", s] for s in self.args.set), [])]

    def start(self):
        import grpc  # noqa: F401  (imported before the clock starts)
        cmd = self.command()
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = t0 + 60
        while gecd_daemon.http_get(self.metrics_port, "/readyz", timeout=1)[0] != 200:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gecd exited or never got ready: {self.log_text()[-2000:]}")
            time.sleep(0.002)
        t_ready = time.monotonic()
        # Connected once ready, as a load balancer would send: a channel made before would sit
        # in gRPC's reconnect backoff (1 s) from its attempts while nothing listened.
        from gecd.v1 import grammar_pb2
        channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}")
        stub = self.stubs.GrammarCorrectionStub(channel)
        response = stub.Correct(grammar_pb2.CorrectRequest(text=README_TEXT), timeout=30,
                                wait_for_ready=True)
        t_first = time.monotonic()
        self.stub, self.channel, self.grammar_pb2 = stub, channel, grammar_pb2
        return {"ready_ms": (t_ready - t0) * 1e3, "first_answer_ms": (t_first - t0) * 1e3,
                "corrected": response.corrected_text}

    def send(self, n):
        for i in range(n):
            self.stub.Correct(self.grammar_pb2.CorrectRequest(text=f"{README_TEXT} ({i})"),
                              timeout=30)

    def stop(self):
        self.channel.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)
        return phases_of(self.log_text())

    def log_text(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()


def median_phases(runs):
    """{process: {phase: (median wall ms, median CPU ms)}} over the runs; the workers are folded
    into one (the slowest each run: the one the first request may wait for)."""
    folded = []
    for phases in runs:
        one = {k: v for k, v in phases.items() if not k.startswith("worker")}
        workers = [v for k, v in phases.items() if k.startswith("worker")]
        if workers:
            one["worker (slowest)"] = max(workers, key=lambda w: w["total"][0])
        folded.append(one)
    out = {}
    for process in folded[0] if folded else []:
        names = folded[0][process].keys()
        out[process] = {
            n: tuple(statistics.median(r[process].get(n, (0, 0))[i] for r in folded
                                       if process in r) for i in (0, 1))
            for n in names}
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gecd", default=os.path.join(ROOT, "build", "gecd"))
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "gecd.yaml"))
    parser.add_argument("--set", action="append", default=[], help="a config override")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cache", default="warm,cold")
    parser.add_argument("--requests", type=int, default=1000,
                        help="after the rounds: a cold start, N requests, the files' residency")
    parser.add_argument("--image", help="measure the residency in a container of this image")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.image:
        args.rounds, args.cache = 0, ""
    args.gecd, args.config = os.path.abspath(args.gecd), os.path.abspath(args.config)
    if not args.image and not os.access(args.gecd, os.X_OK):
        sys.exit(f"cold_start: {args.gecd} is not an executable")
    caches = [c for c in args.cache.split(",") if c]
    if any(c not in ("warm", "cold") for c in caches):
        sys.exit(f"cold_start: --cache {args.cache}: expected warm, cold or warm,cold")

    stub_dir = tempfile.mkdtemp(prefix="gecd-cold-start-stubs-")
    client_test.generate_stubs(stub_dir)
    from gecd.v1 import grammar_pb2_grpc
    model_dir = os.path.normpath(
        os.path.join(os.path.dirname(args.config), "..", "models", "gecd-gec-small"))
    if args.image:
        files = image_files(args.image)
        groups = [("model directory", lambda f: "/opt/gecd/models/" in f),
                  ("weights (model.safetensors)", lambda f: f.endswith("model.safetensors")),
                  ("binaries", lambda f: "/usr/local/bin/" in f),
                  ("libraries", lambda f: ".so" in os.path.basename(f)),
                  ("the whole image", lambda f: True),
                  ("the image without the model", lambda f: "/opt/gecd/models/" not in f)]
    else:
        files = start_up_files(args.gecd, args.config, model_dir)
        groups = [("model directory", lambda f: f.startswith(model_dir)),
                  ("weights (model.safetensors)", lambda f: f.endswith("model.safetensors")),
                  ("binary", lambda f: f == os.path.realpath(args.gecd)),
                  ("libraries", lambda f: ".so" in os.path.basename(f)),
                  ("all start-up files", lambda f: True)]

    report = {"gecd": args.gecd, "config": args.config, "overrides": args.set, "rounds": {}}
    for cache in caches:
        rows, phases = [], []
        for _ in range(args.rounds):
            how = drop_page_cache(files) if cache == "cold" else None
            run = Run(args, grammar_pb2_grpc)
            row = run.start()
            phases.append(run.stop())
            row["dropped_by"] = how
            rows.append(row)
        summary = {k: statistics.median(r[k] for r in rows)
                   for k in ("ready_ms", "first_answer_ms")}
        report["rounds"][cache] = {"runs": rows, "median": summary,
                                   "phases_median_ms": median_phases(phases)}
        print(f"{cache} page cache ({args.rounds} rounds"
              f"{', dropped by ' + rows[0]['dropped_by'] if cache == 'cold' else ''}): "
              f"ready {summary['ready_ms']:.0f} ms, first answer {summary['first_answer_ms']:.0f} ms "
              f"(median; ready min {min(r['ready_ms'] for r in rows):.0f}, "
              f"max {max(r['ready_ms'] for r in rows):.0f})")
        for process, p in report["rounds"][cache]["phases_median_ms"].items():
            print(f"  {process}: " + ", ".join(f"{k} {w:.0f}/{c:.0f}" for k, (w, c) in p.items())
                  + " (ms wall/CPU)")

    if args.requests > 0:
        drop_page_cache(files)
        before = {f: resident_bytes(f)[0] for f in files}
        run = Run(args, grammar_pb2_grpc)
        row = run.start()
        print(f"{'container' if args.image else 'daemon'} from a dropped page cache: ready "
              f"{row['ready_ms']:.0f} ms, first answer {row['first_answer_ms']:.0f} ms")
        after_start = {f: resident_bytes(f)[0] for f in files}
        run.send(args.requests)
        after_requests = {f: resident_bytes(f) for f in files}
        run.stop()
        residency = []
        for f in files:
            resident, size = after_requests[f]
            residency.append({"file": f, "bytes": size, "resident_before": before[f],
                              "resident_after_start": after_start[f],
                              "resident_after_requests": resident})
        report["residency"] = residency

        def share(key, select):
            chosen = [r for r in residency if select(r["file"])]
            total = sum(r["bytes"] for r in chosen)
            return sum(r[key] for r in chosen), total

        print(f"page cache after a cold start and {args.requests} requests (mincore):")
        for name, select in groups:
            b, total = share("resident_before", select)
            s, _ = share("resident_after_start", select)
            r, _ = share("resident_after_requests", select)
            print(f"  {name}: {total / 2**20:.1f} MiB; resident before {100 * b / max(total, 1):.0f}%, "
                  f"after start-up {100 * s / max(total, 1):.0f}%, after the requests "
                  f"{100 * r / max(total, 1):.0f}% ({r / 2**20:.1f} MiB)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
