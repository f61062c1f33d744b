#!/usr/bin/env python3
"""Helper of bench/bench_write.sh (the write benchmark); not meant to be run alone.

Usage: bench_write.py prepare WORK [--scale F]     seed hierarchy, empty template, expected data
       bench_write.py ts-write WORK SIZE DST_ROOT  tensorstore writes SIZE from memory; prints seconds
       bench_write.py verify ROOT SIZE WORK         zarr-python reads ROOT/bench/SIZE == expected
       bench_write.py stats MOUNTPOINT              the mount's store counters (JSON, one line)
       bench_write.py table RESULTS_TSV             the result table

Layout of WORK (made by `prepare`):
    fx/root/bench/SIZE      the sharded arrays fully written by tensorstore (the view of this
                            root gives the unsharded copy that is copied back in)
    fx/expected/SIZE.npy    the data
    empty/bench/SIZE        the same sharded arrays, metadata only (no shard): the target store
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))  # mount_stats, fixtures
from mount_stats import mount_stats  # noqa: E402
from fixtures import (TENSORSTORE, ArraySpec, Level, c_bytes, make_data,  # noqa: E402
                      write_group, write_tensorstore)

# The shapes, shards and inner chunks of the read benchmark's `bench/small` and `bench/large`
# (uint8, `bytes` only, so stored sizes are exact; 64 and 16 inner chunks per shard). Rewriting
# the shard at every close costs about (chunks per shard + 1) / 2 times the data, so the default
# mode writes ~33x (8 KiB) and ~9x (128 KiB) the array size.
SIZES = ("small", "large")
LABELS = {"small": "8 KiB", "large": "128 KiB"}


def specs(scale: float) -> dict[str, ArraySpec]:
    def shards(n):  # whole shard rows, at least one
        return max(1, int(round(n * scale)))
    return {
        "small": ArraySpec("bench/small", TENSORSTORE, (shards(8) * 512, 8192), "uint8", (512, 1024),
                           [c_bytes()], [Level((64, 128), "end", True)], holes=0.0,
                           notes="8 KiB inner chunks, 64 per shard"),
        "large": ArraySpec("bench/large", TENSORSTORE, (shards(12) * 1024, 16384), "uint8",
                           (1024, 2048), [c_bytes()], [Level((256, 512), "end", True)], holes=0.0,
                           notes="128 KiB inner chunks, 16 per shard"),
    }


def cmd_prepare(args) -> int:
    work = Path(args.work)
    fx, empty = work / "fx", work / "empty"
    (fx / "expected").mkdir(parents=True, exist_ok=True)
    for root in (fx / "root", empty):
        root.mkdir(parents=True, exist_ok=True)
        write_group(root, "", {"description": "zarrfs write benchmark"})
        write_group(root, "bench", {})
    meta = {}
    for size, spec in specs(args.scale).items():
        data = make_data(spec)
        write_tensorstore(fx / "root", spec, data)
        write_tensorstore(empty, spec, None)
        np.save(fx / "expected" / f"{size}.npy", data)
        meta[size] = {"shape": list(spec.shape), "chunks": list(spec.chunks),
                      "inner_chunks": list(spec.inner_chunk_shape), "bytes": int(data.nbytes)}
    (work / "arrays.json").write_text(json.dumps(meta, indent=1) + "\n")
    return 0


def expected(work: str, size: str) -> np.ndarray:
    return np.load(Path(work) / "fx" / "expected" / f"{size}.npy")


def cmd_ts_write(args) -> int:
    import tensorstore as ts
    data = expected(args.work, args.size)
    metadata = json.loads((Path(args.work) / "empty" / "bench" / args.size / "zarr.json").read_text())
    dst = Path(args.dst_root) / "bench" / args.size
    start = time.perf_counter()
    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(dst) + "/"},
                     "metadata": metadata}, create=True).result()
    store.write(data).result()
    secs = time.perf_counter() - start
    print(f"{secs:.3f}")
    return 0


def cmd_verify(args) -> int:
    import zarr
    from zarr.storage import LocalStore
    want = expected(args.work, args.size)
    try:
        arr = zarr.open_array(store=LocalStore(args.root, read_only=True), path=f"bench/{args.size}",
                              mode="r")
        got = arr[...]
    except Exception as e:  # noqa: BLE001 (any failure to read is a failed check)
        print(f"bench: VERIFY FAILED: zarr-python cannot read {args.root}/bench/{args.size}: {e!r}",
              file=sys.stderr)
        return 1
    sharded = any(c.__class__.__name__ == "ShardingCodec" for c in arr.metadata.codecs)
    if got.shape != want.shape or not np.array_equal(got, want) or not sharded:
        bad = "not sharded" if not sharded else (
            f"shape {got.shape} != {want.shape}" if got.shape != want.shape
            else f"{int(np.count_nonzero(got != want))} of {want.size} elements differ")
        print(f"bench: VERIFY FAILED: {args.root}/bench/{args.size}: {bad}", file=sys.stderr)
        return 1
    return 0


def cmd_stats(args) -> int:
    print(json.dumps(mount_stats(args.mountpoint)))
    return 0


def cmd_durable_copy(args) -> int:
    """Copy a tree the way a durable writer would: every file written, fsynced and closed,
    then its directory fsynced. Prints the seconds it took."""
    src, dst = Path(args.src), Path(args.dst)
    start = time.perf_counter()
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        out_dir = dst / rel
        out_dir.mkdir(parents=True, exist_ok=True)
        dir_fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for name in sorted(filenames):
                data = (Path(dirpath) / name).read_bytes()
                fd = os.open(out_dir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    os.write(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    print(f"{time.perf_counter() - start:.3f}")
    return 0


def cmd_table(args) -> int:
    rows = list(csv.DictReader(open(args.results), delimiter="\t"))
    head = ("inner chunks", "writer", "MB", "cp s", "commit s", "seconds", "MB/s", "set MB",
            "stored MB", "write amp", "shard writes", "shards", "unmount s", "vs ts", "vs native",
            "vs durable")
    widths = (12, 16, 7, 7, 8, 8, 6, 8, 9, 9, 12, 6, 9, 7, 9, 10)
    print("  ".join(f"{h:>{w}s}" for h, w in zip(head, widths)))
    for size in SIZES:
        sub = [r for r in rows if r["size"] == size]
        by_writer = {r["writer"]: float(r["seconds"]) for r in sub}
        t_ts, t_native, t_durable = (by_writer.get(w) for w in ("tensorstore", "native", "native-durable"))
        for r in sub:
            mb = int(r["bytes"]) / 1e6
            secs = float(r["seconds"])
            stored = int(r["stored_bytes"])
            is_ts = r["writer"] == "tensorstore"
            is_view = r["writer"] in ("default", "write-back")
            ratio = lambda other: "-" if other is None or not is_view else f"{other / secs:.2f}x"
            cells = (
                LABELS[size], r["writer"], f"{mb:.1f}",
                "-" if is_ts else f"{float(r['cp_s']):.2f}",
                "-" if is_ts else f"{float(r['commit_s']):.2f}",
                f"{secs:.2f}", f"{mb / secs:.1f}",
                f"{int(r['set_bytes']) / 1e6:.1f}" if is_view else "-",
                f"{stored / 1e6:.1f}",
                f"{int(r['set_bytes']) / stored:.2f}" if is_view else "-",
                r["sets"] if is_view else "-",
                r["shards"],
                f"{float(r['unmount_s']):.2f}" if is_view else "-",
                "1.00x" if is_ts else ("-" if t_ts is None else f"{secs / t_ts:.2f}x"),
                ratio(t_native),
                ratio(t_durable),
            )
            print("  ".join(f"{c:>{w}s}" for c, w in zip(cells, widths)))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("work")
    p.add_argument("--scale", type=float, default=1.0)
    p.set_defaults(func=cmd_prepare)
    p = sub.add_parser("ts-write")
    p.add_argument("work")
    p.add_argument("size", choices=SIZES)
    p.add_argument("dst_root")
    p.set_defaults(func=cmd_ts_write)
    p = sub.add_parser("verify")
    p.add_argument("root")
    p.add_argument("size", choices=SIZES)
    p.add_argument("work")
    p.set_defaults(func=cmd_verify)
    p = sub.add_parser("stats")
    p.add_argument("mountpoint")
    p.set_defaults(func=cmd_stats)
    p = sub.add_parser("durable-copy")
    p.add_argument("src")
    p.add_argument("dst")
    p.set_defaults(func=cmd_durable_copy)
    p = sub.add_parser("table")
    p.add_argument("results")
    p.set_defaults(func=cmd_table)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
