"""The mixed workload for a long run: scripts/dev/soak.sh MINUTES [local|s3] (not part of CI).

Two mounts of one source (a local directory, or an S3 prefix on moto through the
fault-injecting proxy of the tests, failing FAULT_PERCENT of requests), four threads doing
random writes, renames onto keys, deletes, reads and listings (tests/clients/workload.py), in
rounds of ROUND seconds. After each round every key is read through both mounts and from the
source, and the round's history is checked against the model of the unsharded tree
(tests/clients/history.py); the next round starts from the state the source settled in.
Every SAMPLE seconds the daemons' RSS, open descriptors and counters are sampled.

Prints a summary: operations by kind and outcome, faults injected, divergences (wrong,
stale or invented bytes; lost acknowledged writes: must be 0), hangs (0), daemon restarts
(0), the longest operation, RSS and descriptors first/max/last, and the daemons' counters.
Exits non-zero if anything must-be-zero was not.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "scripts"), str(REPO / "tests" / "clients")]

import shardindex as si  # noqa: E402
from helpers import mount_stats  # noqa: E402
from history import Checker  # noqa: E402
from mounting import Mount  # noqa: E402
from workload import (final_reads, make_chunk_dirs, run_workload, settled_state,  # noqa: E402
                      store_reads)
from writing import WRITE_FLAGS, build, payload_spec, shard_problems  # noqa: E402

ARRAY = "soak/arr"
TTL = 1.0
ROUND = 60.0
SAMPLE = 10.0
FAULT_PERCENT = 5.0


def proc_figures(pid: int) -> tuple[int, int]:
    """(RSS in KiB, open descriptors) of a process."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


class Sampler(threading.Thread):
    def __init__(self, mounts: list[Mount]):
        super().__init__(daemon=True)
        self.mounts, self.samples, self.stop = mounts, [], threading.Event()

    def run(self) -> None:
        while not self.stop.wait(SAMPLE):
            self.take()

    def take(self) -> None:
        row = []
        for m in self.mounts:
            try:
                row.append(proc_figures(m.pids[0]))
            except (OSError, IndexError):
                row.append((0, 0))
        self.samples.append((time.monotonic(), row))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("minutes", type=float)
    ap.add_argument("source", nargs="?", choices=["local", "s3"], default="local")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--round", type=float, default=ROUND)
    args = ap.parse_args()
    binary = Path(os.environ.get("ZARRFS_BIN", REPO / "target" / "release" / "zarrfs"))
    work = Path(tempfile.mkdtemp(prefix="zarrfs-soak-"))
    spec = payload_spec(ARRAY, shape=(16, 16), shard=(8, 8))
    local = work / "src"
    build(local, [spec])
    keys = [si.chunk_key((i, j), spec.cke) for i in range(4) for j in range(4)]

    proxy = faults = None
    options = [*WRITE_FLAGS, "--metadata-ttl", str(TTL)]
    if args.source == "s3":
        import seed_remote as SR
        from test_fault_workload import RandomFaults
        from test_remote_retries import FaultProxy
        import subprocess
        subprocess.run(["bash", str(REPO / "scripts" / "servers.sh"), "start", "s3"], check=True)
        for k, v in SR.client_env("s3").items():
            os.environ[k] = v
        SR.make_bucket("s3")
        prefix = f"soak-{args.seed}"
        SR.upload_tree("s3", local, prefix)
        proxy = FaultProxy(SR.endpoint("s3")).start()
        source = SR.url("s3", prefix)
        options += ["--endpoint-url", proxy.url]
    else:
        source = str(local)
    mounts = [Mount(binary, source, work / f"mnt{n}", options, work / f"zarrfs{n}.log").start()
              for n in range(2)]
    pids = [list(m.pids) for m in mounts]
    roots = [m.path(ARRAY) for m in mounts]
    make_chunk_dirs(roots, keys)
    sampler = Sampler(mounts)
    sampler.take()
    sampler.start()
    if proxy is not None:
        faults = RandomFaults(FAULT_PERCENT, args.seed)
        proxy.arm(faults)

    end = time.monotonic() + args.minutes * 60
    totals: dict[str, int] = {}
    divergences, hangs, parse, known, longest, rounds, ops = [], [], [], 0, 0.0, 0, 0
    state = {k: "absent" for k in keys}
    started = time.monotonic()
    while time.monotonic() < end:
        seconds = min(args.round, max(1.0, end - time.monotonic()))
        run = run_workload(roots, keys, args.threads, seconds, args.seed + rounds,
                           grace=90.0, seq_base=(rounds + 1) * 10_000_000)
        hangs += run.hung
        if proxy is not None:
            proxy.disarm()
        time.sleep(TTL + 0.5)
        final_reads(run, roots, keys)
        if args.source == "s3":
            from remote import download_tree
            array_dir = download_tree("s3", prefix, work / f"bucket{rounds}") / ARRAY
        else:
            array_dir = local / ARRAY
        parse += store_reads(run, array_dir, keys) + shard_problems(array_dir, allow_temp=True)
        checker = Checker(run.ops, window=TTL + 0.5, initial=state)
        problems = checker.check()
        divergences += [f"round {rounds}: {p}" for p in problems]
        known += len(checker.known)
        if problems:
            run.log(work / f"ops-round{rounds}.log")
        state = settled_state(run, keys)
        for k, n in run.counts().items():
            totals[k] = totals.get(k, 0) + n
        longest = max(longest, run.longest)
        ops += len(run.ops)
        rounds += 1
        if proxy is not None:
            proxy.arm(faults)
        print(f"round {rounds}: {len(run.ops)} operations, {len(problems)} divergences, "
              f"longest {run.longest:.3f} s", flush=True)
    elapsed = time.monotonic() - started
    sampler.stop.set()
    sampler.take()
    restarts = sum(1 for m, p in zip(mounts, pids) if not m.alive() or list(m.pids) != p)
    counters = [mount_stats(m.path()) for m in mounts]
    for m in mounts:
        m.stop()
    if proxy is not None:
        proxy.close()

    def col(i, j):
        return [row[i][j] for _, row in sampler.samples]

    summary = {
        "source": args.source, "seed": args.seed, "minutes": round(elapsed / 60, 1),
        "rounds": rounds, "operations": ops, "by_kind": totals,
        "faults_injected": dict(faults.injected) if faults else {},
        "requests": len(proxy.seen) if proxy else None,
        "divergences": len(divergences), "documented_empty_reads": known,
        "unparseable_shards": len(parse), "hangs": len(hangs), "daemon_restarts": restarts,
        "longest_operation_s": round(longest, 3),
        "rss_kib": [{"first": col(i, 0)[0], "max": max(col(i, 0)), "last": col(i, 0)[-1]}
                    for i in range(len(mounts))],
        "fds": [{"first": col(i, 1)[0], "max": max(col(i, 1)), "last": col(i, 1)[-1]}
                for i in range(len(mounts))],
        "counters": counters,
    }
    print(json.dumps(summary, indent=1))
    for d in divergences[:5] + parse[:5] + hangs[:5]:
        print(d)
    print(f"work directory: {work}")
    bad = len(divergences) + len(parse) + len(hangs) + restarts
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
