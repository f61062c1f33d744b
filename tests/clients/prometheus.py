"""A real Prometheus server for the metrics tests (tests/clients/test_metrics.py).

Debian's `prometheus` package (scripts/setup.sh --test installs it; its own service is never
started) provides the binary; each test starts its own on a free port of 127.0.0.1, with its
own configuration and data directory, scraping the given targets every second, and stops it
by its PID. `query()` asks its HTTP API for an instant vector.
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

BINARY = shutil.which("prometheus") or "/usr/bin/prometheus"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, workdir: Path, targets: list[str], scrape_interval: str = "1s"):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        config = self.workdir / "prometheus.yml"
        config.write_text(
            "global:\n"
            f"  scrape_interval: {scrape_interval}\n"
            f"  scrape_timeout: {scrape_interval}\n"
            "scrape_configs:\n"
            "  - job_name: zarrfs\n"
            "    static_configs:\n"
            f"      - targets: {json.dumps(targets)}\n")
        self.log = self.workdir / "prometheus.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [BINARY, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as r:
            answer = json.load(r)
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def value(self, expr: str) -> float | None:
        """The single value of `expr` now, None if it has no sample."""
        result = self.query(expr)
        assert len(result) <= 1, f"{expr}: {result}"
        return float(result[0]["value"][1]) if result else None

    def wait_for(self, expr: str, expected: float, timeout: float = 30) -> float | None:
        """Wait until `expr` equals `expected` (a scrape after the workload); the last value."""
        deadline = time.monotonic() + timeout
        got = None
        while time.monotonic() < deadline:
            got = self.value(expr)
            if got == expected:
                return got
            time.sleep(0.25)
        return got

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
