"""Local `gecd serve` daemons for the Python tests: started on free 127.0.0.1 ports with the echo
backend (the repository's default model only for its tokenizer), waited for until ready,
scraped, and stopped by their own pid (SIGTERM, the supervisor drains, then SIGKILL)."""

import glob
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODEL_DIR = os.path.join(ROOT, "models", "gecd-gec-small")


def find_binary(name, env):
    """$env (set by CMake to the built target), else build/NAME; None when neither exists."""
    path = os.environ.get(env) or os.path.join(ROOT, "build", name)
    return path if os.access(path, os.X_OK) else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(port, path, timeout=2.0):
    """(status, body) of GET http://127.0.0.1:PORT/PATH; status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, socket.timeout):
        return 0, ""


def terminate(process, timeout=15.0):
    """SIGTERM to `process` (a subprocess.Popen), up to `timeout` to exit, then SIGKILL."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def parse_metrics(text):
    """{name: (type, [(labels, value)])} of a Prometheus text exposition."""
    metrics, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", line)
            if not m:
                raise ValueError(f"not a sample line: {line!r}")
            name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
            family = name
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and name[: -len(suffix)] in types:
                    family = name[: -len(suffix)]
            metrics.setdefault(family, (types.get(family, "untyped"), []))[1].append(
                (name + labels, value))
    return metrics


class Daemon:
    """One `gecd serve` on free ports. Use as a context manager; `config_text` (a gecd.yaml) is
    written to a temporary file that lives as long as the daemon (its children re-read it)."""

    def __init__(self, gecd, config_text="", overrides=(), name="gecd"):
        self.name = name
        self.grpc_port, self.metrics_port = free_port(), free_port()
        self._dir = tempfile.mkdtemp(prefix=f"gecd-{name}-")
        self.config_path = os.path.join(self._dir, "gecd.yaml")
        with open(self.config_path, "w") as f:
            f.write(config_text)
        self.log_path = os.path.join(self._dir, "daemon.log")
        # The tests re-send the same sentences and measure the engine's time: no sentence cache
        # (a test's overrides may turn it back on).
        self.args = [gecd, "serve", "--config", self.config_path,
                     "--set", "server.sentence_cache_mb=0", *overrides,
                     "--set", "engine.backend=echo", "--set", f"model.dir={MODEL_DIR}",
                     "--set", f"server.listen=127.0.0.1:{self.grpc_port}",
                     "--set", f"server.metrics_listen=127.0.0.1:{self.metrics_port}",
                     "--set", "logging.level=warn", "--set", "logging.format=text"]
        self.process = None

    @property
    def target(self):
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, timeout=60.0):
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daemon {self.name} exited {self.process.returncode}: "
                                   f"{self.log_tail()}")
            if http_get(self.metrics_port, "/readyz", timeout=1.0)[0] == 200:
                return self
            time.sleep(0.1)
        raise RuntimeError(f"daemon {self.name} not ready in {timeout:.0f} s: {self.log_tail()}")

    def log_tail(self, lines=20):
        with open(self.log_path) as f:
            return "".join(f.readlines()[-lines:])

    def metrics(self):
        status, body = http_get(self.metrics_port, "/metrics")
        if status != 200:
            raise RuntimeError(f"daemon {self.name}: /metrics answered {status}")
        return parse_metrics(body)

    def segments(self):
        """The shared-memory segments of this daemon's supervisor: /dev/shm/gecd-<pid>-*."""
        return glob.glob(f"/dev/shm/gecd-{self.process.pid}-*")

    def stop(self, timeout=15.0):
        """SIGTERM, up to `timeout` to exit, then SIGKILL. Returns the exit code."""
        if self.process is None or self._log.closed:
            return self.process and self.process.returncode
        terminate(self.process, timeout)
        self._log.close()
        return self.process.returncode

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc):
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)
