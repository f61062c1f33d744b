"""A round trip between the daemon and a test server: the project's `zarrfs-delay-proxy`.

`DelayProxy(upstream_port, rtt_ms)` starts the proxy on a free port of 127.0.0.1, in front of a
server on `upstream_port`, logging every chunk a client sends. `waves()` counts the round trips
of wall time a workload took: sends more than half a round trip after the one before start a
new wave, so requests sent together count once and requests sent one after another count one
each. It is a member of the workspace apart from the product (bench/delay-proxy; built by
`cargo build --workspace`, as scripts/test.sh does, or `cargo build -p zarrfs-delay-proxy`) and
is found beside the zarrfs binary under test (ZARRFS_BIN's directory), or in
target/{debug,release}.
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAME = "zarrfs-delay-proxy"


def proxy_binary() -> Path:
    candidates = []
    if os.environ.get("ZARRFS_BIN"):
        candidates.append(Path(os.environ["ZARRFS_BIN"]).resolve().parent / NAME)
    candidates += [REPO / "target" / "debug" / NAME, REPO / "target" / "release" / NAME]
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(f"{NAME} not built (cargo build --workspace; looked in "
                            f"{', '.join(map(str, candidates))})")


class DelayProxy:
    def __init__(self, upstream_port: int, rtt_ms: float, workdir: Path):
        self.rtt_ms = rtt_ms
        self.log = workdir / f"delay-proxy-{upstream_port}.log"
        port_file = workdir / f"delay-proxy-{upstream_port}.port"
        port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [str(proxy_binary()), "--upstream", f"127.0.0.1:{upstream_port}", "--rtt-ms", str(rtt_ms),
             "--log", str(self.log), "--port-file", str(port_file)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"{NAME} did not start: {self.proc.stderr.read().decode(errors='replace')}")
            time.sleep(0.02)
        self.port = int(port_file.read_text())

    def sends(self) -> list[tuple[float, int, int]]:
        """(seconds since start, connection, bytes) of every chunk a client sent so far."""
        out = []
        for line in self.log.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                out.append((int(parts[0]) / 1e6, int(parts[1]), int(parts[2])))
        return out

    def mark(self) -> int:
        """A position in the log: `waves(since=mark)` counts what came after it."""
        return len(self.sends())

    def waves(self, since: int = 0) -> int:
        """Round trips of wall time taken by the sends after `since`."""
        times = sorted(t for t, _, _ in self.sends()[since:])
        gap = self.rtt_ms / 2000
        return sum(1 for i, t in enumerate(times) if i == 0 or t - times[i - 1] > gap)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "DelayProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
