#!/usr/bin/env python3
"""Crash-loop campaign: kill -9 of the zarrfs daemon at random moments of a write workload,
round after round, with strict checks of the store after every kill (tests/clients/crashing.py
says what a round does and checks).

Usage (with the project's venv, as root, /dev/fuse; build the binary first):
    .venv/bin/python scripts/dev/crash_loop.py --rounds 50 --source local --mode default --seed 1
    .venv/bin/python scripts/dev/crash_loop.py --rounds 20 --source s3 --mode writeback --seed 1
    .venv/bin/python scripts/dev/crash_loop.py --rounds 20 --source s3 --mode journal --seed 1
    .venv/bin/python scripts/dev/crash_loop.py --rounds 20 --source s3 --mode journal --latency-ms 20
    .venv/bin/python scripts/dev/crash_loop.py --rounds 50 --source s3 --mode journal --layout unsharded

Options:
    --rounds N                 rounds (default 20)
    --source local|s3          a local directory, or a prefix of the moto S3 server on 127.0.0.1
                               (started here with `scripts/servers.sh start s3` if it is not
                               running, and stopped at the end if this run started it)
    --mode default|writeback|journal
                               default: close() commits; writeback: --write-back-delay (drawn
                               per round from 0.05, 0.5, 30 s), the writer fsyncs every 3rd or
                               every 10th write (drawn per round); both say --no-journal on S3
                               (the journal is the default of remote sources). journal:
                               --journal-dir (one for the campaign, under the workdir) and
                               --write-back-delay drawn from the default 1 s, 0.05, 0.5, 30 s;
                               the writer fsyncs never or every 10th write; every write whose
                               close() returned must be in the store once the remount has
                               replayed the journal
    --layout sharded|unsharded sharded (default): 4 shards of 4x4 inner chunks; unsharded: the
                               same 16 chunks each stored as it is (a file, an object), which
                               the journal holds as it holds chunks of shards
    --seed S                   seed of the kill points and delays (default 1)
    --kill-acks LOW,HIGH       acknowledged writes before the kill (default 5,300 local; 3,60 s3)
    --latency-ms MS            S3 only: the mounts reach moto through zarrfs-delay-proxy adding
                               this round trip (a cloud's latency; the checks read S3 directly)
    --binary PATH              the zarrfs binary (default $ZARRFS_BIN or target/debug/zarrfs)
    --workdir DIR              mountpoints, logs and downloads (default: a fresh temporary
                               directory, removed at the end unless a round failed)
    --verbose                  print every round

Prints one line per failed round (every round with --verbose), with its failures and the
daemon logs, and a summary table: rounds, acks (closes acknowledged), synced (fsyncs
acknowledged), in flight (writes the kill interrupted), landed (of those, found committed:
killed between commit and reply), mid-commit (rounds whose kill left a temporary file: killed
inside a commit), torn (shards or chunks that do not parse, after the kill or seen by the
poller while the writer ran: must be 0), lost acked (default mode; journal mode after the
remount's replay: must be 0), lost fsynced (write-back and journal modes: must be 0), invented
(values never written: must be 0), other failures (writes failing before the kill, the remount
not showing the store, leftovers not swept, no replay logged, journal segments left...),
leftovers found and swept by the remount, unsynced lost (write-back: closes not committed
before the kill, allowed), pending (journal: closes not committed before the kill, which the
remount's replay must commit; lost ones count as lost acked), replayed (journal: files the
remounts' replays committed, from their log lines; at least pending), polls (reads of the
store while writing), wall time.
Exit status 1 if any round failed.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "tests" / "clients"))

import crashing as C  # noqa: E402

COLUMNS = [("source", "source"), ("mode", "mode"), ("rounds", "rounds"), ("acks", "acks"),
           ("synced", "synced"), ("in_flight", "in flight"), ("landed", "landed"),
           ("mid_commit", "mid-commit"), ("torn", "torn"), ("lost_acked", "lost acked"),
           ("lost_synced", "lost fsynced"), ("invented", "invented"), ("other", "other"),
           ("leftovers", "leftovers"), ("swept", "swept"), ("unsynced_lost", "unsynced lost"),
           ("pending", "pending"), ("replayed", "replayed"), ("polls", "polls"),
           ("seconds", "wall s")]


def servers_sh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "scripts" / "servers.sh"), *args], capture_output=True,
                          text=True, timeout=180)


def table(summary: C.Summary) -> str:
    cells = [f"{getattr(summary, k):.1f}" if k == "seconds" else str(getattr(summary, k))
             for k, _ in COLUMNS]
    heads = [h for _, h in COLUMNS]
    widths = [max(len(h), len(c)) for h, c in zip(heads, cells)]
    fmt = " | ".join(f"{{:>{w}}}" for w in widths)
    return "\n".join([fmt.format(*heads), "-+-".join("-" * w for w in widths), fmt.format(*cells)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--source", choices=["local", "s3"], default="local")
    ap.add_argument("--mode", choices=list(C.CrashLoop.MODES), default="default")
    ap.add_argument("--layout", choices=list(C.LAYOUTS), default="sharded")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kill-acks", default=None)
    ap.add_argument("--latency-ms", type=float, default=0.0)
    ap.add_argument("--binary", default=os.environ.get("ZARRFS_BIN", REPO / "target/debug/zarrfs"))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)

    binary = Path(args.binary).resolve()
    if not os.access(binary, os.X_OK):
        print(f"crash_loop: no zarrfs binary at {binary} (cargo build --workspace, or --binary)", file=sys.stderr)
        return 2
    kill_acks = (5, 300) if args.source == "local" else (3, 60)
    if args.kill_acks:
        low, high = args.kill_acks.split(",")
        kill_acks = (int(low), int(high))
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="zarrfs-crash-"))
    workdir.mkdir(parents=True, exist_ok=True)

    started = False
    proxy = None
    if args.latency_ms > 0 and args.source != "s3":
        print("crash_loop: --latency-ms needs --source s3", file=sys.stderr)
        return 2
    if args.source == "s3":
        was_running = servers_sh("status", "s3").returncode == 0
        res = servers_sh("start", "s3")
        if res.returncode != 0:
            print(f"crash_loop: servers.sh start s3 failed:\n{res.stderr}{res.stdout}", file=sys.stderr)
            return 2
        started = not was_running
        prefix = f"crash-loop-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        source = C.S3Source(workdir, prefix, args.layout)
        if args.latency_ms > 0:
            from latency import DelayProxy

            proxy = DelayProxy(source.SR.port("s3"), args.latency_ms, workdir)
            source.env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{proxy.port}"
    else:
        source = C.LocalSource(workdir / "src", args.layout)

    loop = C.CrashLoop(binary, workdir, source, args.mode, args.seed, kill_acks=kill_acks)
    start = time.monotonic()
    crashed = 0

    def show(r: C.RoundResult) -> None:
        if args.verbose or r.failures:
            print(r.line(), flush=True)
        if r.failures:
            for f in r.failures[:20]:
                print(f"    {f}")
            print("    daemon log:\n" + "\n".join("      " + x for x in r.log_tail.splitlines()))

    try:
        for n in range(args.rounds):
            try:
                show(loop.round(n))
            except Exception:  # noqa: BLE001 - a round that cannot run is a failure, counted
                crashed += 1
                loop.results.append(C.RoundResult(n, other=[traceback.format_exc()]))
                print(f"round {n}: could not run:\n{traceback.format_exc()}", flush=True)
    finally:
        source.close()
        if proxy is not None:
            proxy.close()
        if started and os.environ.get("ZARRFS_KEEP_SERVERS") != "1":
            servers_sh("stop", "s3")
    summary = C.summarize(loop, time.monotonic() - start)
    print()
    through = f" through a {args.latency_ms:g} ms round trip" if proxy is not None else ""
    print(f"crash loop: {args.rounds} rounds, source {args.source}{through}, mode {args.mode}, "
          f"seed {args.seed}, kill after {kill_acks[0]}..{kill_acks[1]} acks, binary {binary}")
    print(table(summary))
    if summary.failed or crashed:
        print(f"FAILED (work directory kept: {workdir})")
        return 1
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
