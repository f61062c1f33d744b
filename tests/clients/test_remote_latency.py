"""A remote source a round trip away: what goes out together, counted at a delaying proxy.

The daemon reaches nginx through `zarrfs-delay-proxy` (tests/clients/latency.py) with a
100 ms round trip; the proxy's log tells how many round trips of wall time ("waves") a
workload took, whatever the machine's load, so nothing here is timed. The fixture is one array
of 64 shards of 16 inner chunks each, written by zarr-python; a workload that fetched one
shard after another would take over 64 waves.

  - a cold `find` of the mount lists every chunk file, in a few waves: the indexes a listing
    needs go out together, and those of the next directories are read ahead;
  - a cold `cp -r` copies every chunk byte for byte, in a few waves, with one GET per shard,
    the read-ahead's bytes used and none wasted;
  - readers of different shards that do not list (8 threads opening chunk files by name)
    overlap their fetches.
"""
from __future__ import annotations

import subprocess
import threading

import numpy as np
import pytest

import seed_remote as SR
from helpers import walk_files
from latency import DelayProxy
from remote import delta, record, remote, settled, stats  # noqa: F401

RTT_MS = 100
SHAPE, SHARDS, CHUNKS = (256, 256), (32, 32), (8, 8)
N_SHARDS = (256 // 32) ** 2  # 64


@pytest.fixture(scope="module")
def dataset(remote, tmp_path_factory):
    """The array `a` (uint8, 64 shards of 4 × 4 chunks of 8 × 8) seeded to nginx; returns
    (prefix, expected chunk files: relative path -> bytes)."""
    import zarr

    root = tmp_path_factory.mktemp("latency") / "root"
    data = (np.arange(np.prod(SHAPE), dtype=np.uint64) * 2654435761 % 251).astype("uint8").reshape(SHAPE)
    group = zarr.open_group(root, mode="w", zarr_format=3)
    arr = group.create_array("a", shape=SHAPE, dtype="uint8", chunks=CHUNKS, shards=SHARDS,
                             compressors=None)
    arr[...] = data
    expected = {}
    for i in range(SHAPE[0] // CHUNKS[0]):
        for j in range(SHAPE[1] // CHUNKS[1]):
            block = data[i * 8:(i + 1) * 8, j * 8:(j + 1) * 8]
            expected[f"c/{i}/{j}"] = block.tobytes()
    prefix = remote.seed("http", root, "latency")
    return prefix, expected


@pytest.fixture
def slow_view(dataset, mounter, tmp_path):
    """A read-only mount of the dataset through the proxy: (mount, proxy, expected files)."""
    prefix, expected = dataset
    proxy = DelayProxy(SR.port("http"), RTT_MS, tmp_path)
    url = SR.url("http", prefix).replace(f":{SR.port('http')}/", f":{proxy.port}/")
    try:
        view = mounter(url, "--read-only")
        yield view, proxy, expected
    finally:
        proxy.close()


def test_cold_find_takes_a_few_round_trips(slow_view):
    view, proxy, expected = slow_view
    mark, s0 = proxy.mark(), stats(view)
    res = subprocess.run(["find", str(view.path("a"))], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    waves, d = proxy.waves(mark), delta(s0, stats(view))
    record("cold find at latency", rtt_ms=RTT_MS, shards=N_SHARDS, waves=waves, requests=d)
    files = {p[len(str(view.path("a"))) + 1:] for p in res.stdout.split()}
    assert set(expected) <= files, "find does not show every chunk file"
    # Sequentially: 64 shard indexes, 9 shard directories, the metadata: over 75 waves.
    assert waves <= N_SHARDS // 32 + 14, f"find of {N_SHARDS} shards took {waves} round trips: {d}"


def test_cold_cp_r_reads_ahead(slow_view, tmp_path):
    view, proxy, expected = slow_view
    mark, s0 = proxy.mark(), stats(view)
    res = subprocess.run(["cp", "-r", str(view.path("a")), str(tmp_path / "copy")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    waves, d = proxy.waves(mark), delta(s0, stats(view))
    record("cold cp -r at latency", rtt_ms=RTT_MS, shards=N_SHARDS, waves=waves, requests=d)
    copied = {k: p.read_bytes() for k, p in walk_files(tmp_path / "copy").items() if k != "zarr.json"}
    assert copied == expected, "the copy differs from the array's chunks"
    assert d["get"] <= 1.2 * N_SHARDS + 3, f"more than one GET per shard: {d}"
    assert d["read_ahead_used_bytes"] > 0, f"the copy used nothing read ahead: {d}"
    assert d["read_ahead_wasted_bytes"] == 0, d
    assert waves <= N_SHARDS // 32 + 14, f"cp -r of {N_SHARDS} shards took {waves} round trips: {d}"


def test_readers_of_different_shards_overlap(slow_view):
    view, proxy, expected = slow_view
    # Warm the metadata and the directories, so what is left is one fetch per shard.
    (view.path("a") / "zarr.json").read_bytes()
    for i in range(0, 32, 4):
        assert (view.path("a") / "c" / str(i)).is_dir()
    mark, s0 = proxy.mark(), stats(view)
    wrong: list[str] = []

    def reader(row: int) -> None:  # shard row `row // 4`: 8 shards, one chunk of each
        for j in range(0, 32, 4):
            key = f"c/{row}/{j}"
            if (view.path("a") / key).read_bytes() != expected[key]:
                wrong.append(key)

    threads = [threading.Thread(target=reader, args=(row,)) for row in range(0, 32, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    waves, d = proxy.waves(mark), delta(s0, stats(view))
    record("parallel readers at latency", rtt_ms=RTT_MS, shards=N_SHARDS, waves=waves, requests=d)
    assert not wrong, f"wrong bytes: {wrong}"
    # 8 readers, 8 shards each, one after another within a reader: 8 waves if they overlap.
    assert waves <= 8 + 6, f"8 readers of 64 shards took {waves} round trips: {d}"


def test_readers_in_one_directory_overlap(slow_view):
    """Lookups in one directory run in parallel (FUSE_PARALLEL_DIROPS): 8 readers of chunk
    files of c/0 that lie in 8 shards fetch them together, where the kernel used to send the
    lookups, each waiting for its shard's index, one at a time."""
    view, proxy, expected = slow_view
    (view.path("a") / "zarr.json").read_bytes()
    assert (view.path("a") / "c" / "0").is_dir()
    mark, s0 = proxy.mark(), stats(view)
    keys = [f"c/0/{j}" for j in range(0, 32, 4)]
    got: dict[str, bytes] = {}

    def reader(key: str) -> None:
        got[key] = (view.path("a") / key).read_bytes()

    threads = [threading.Thread(target=reader, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Readers whose lookups arrive in the shards' C order are read ahead of (`read_order`):
    # those fetches may still be out when the readers are done.
    d = delta(s0, settled(view))
    waves = proxy.waves(mark)
    record("readers of one directory at latency", rtt_ms=RTT_MS, waves=waves, requests=d)
    assert got == {k: expected[k] for k in keys}, "wrong bytes"
    # One fetch per shard: by its reader, or ahead of it; no more ahead than read_order allows.
    fetched = d["index_cache_misses"] + d["read_ahead_indexes"]
    assert d["get"] == fetched, f"a shard fetched twice: {d}"
    assert len(keys) <= fetched <= len(keys) + 16, f"one fetch per shard: {d}"
    assert waves <= 3, f"8 readers of 8 shards in one directory took {waves} round trips: {d}"
