#!/usr/bin/env python3
"""Where zarr-python's time goes when it reads an array from a directory (a zarrfs mount or a
local copy): every LocalStore.get is timed, and the run is summarised as the total, the first
gets in order (the metadata probes a client makes before any chunk: zarr.json, and with
zarr_format=None the v2 documents .zgroup, .zattrs, .zmetadata too), the gets started per
100 ms (a flat rate is per-file cost; a gap is a wait), and the slow gets after the start.
Used to split row d of bench/bench_latency.sh into round trips and per-file cost.

Usage: zarr_read_timeline.py GROUP_DIR [ARRAY]   (ARRAY defaults to "data", as in the bench)
"""
from __future__ import annotations

import sys
import time

import zarr
from zarr.storage import LocalStore


def main(argv: list) -> int:
    group_dir = argv[1]
    array = argv[2] if len(argv) > 2 else "data"
    original = LocalStore.get
    log: list = []
    t0 = time.monotonic()

    async def timed_get(self, key, prototype=None, byte_range=None):
        start = time.monotonic()
        got = await original(self, key, prototype, byte_range)
        log.append((start - t0, time.monotonic() - start, key))
        return got

    LocalStore.get = timed_get
    t0 = time.monotonic()
    zarr.open_group(group_dir, mode="r")[array][...]
    total = time.monotonic() - t0
    log.sort()
    print(f"total {total:.3f} s, {len(log)} gets, sum of their durations "
          f"{sum(d for _, d, _ in log):.3f} s")
    print("first gets:", ", ".join(f"{k} at {s:.3f} took {d:.3f}" for s, d, k in log[:8]))
    per = [0] * (int(total * 10) + 1)
    for s, _, _ in log:
        per[min(int(s * 10), len(per) - 1)] += 1
    print("gets started per 100 ms:", per)
    slow = [(s, d, k) for s, d, k in log if s > 0.3 and d > 0.008]
    print(f"gets after 0.3 s taking > 8 ms: {len(slow)}",
          ", ".join(f"{k} at {s:.3f} took {d:.3f}" for s, d, k in slow[:10]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
