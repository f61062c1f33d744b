"""Walks of many chunk files: what the daemon keeps per file, and what it gives back.

One sharded uint8 array of 262,144 inner chunks of 1x1 (512 x 512, shards of 64 x 64 chunks),
written by tensorstore, so 512 chunk directories of 512 files each through the view:
- `du` and `find` through the mount see every file with its stored size (the sum of the shard
  indexes' entries), and every `stat` agrees with the bytes a read returns;
- with `--max-inodes 20000` the daemon's inode table never holds much more than that during
  a walk of all of them (the kernel is asked to forget the directories walked first, counted
  as `kernel_forgets_asked`), and files forgotten that way are looked up and read again;
- after the kernel drops its inodes (`echo 2 > drop_caches`), the table is back to a handful
  of entries and what its tables take is back under a MiB;
- `zarrfs stats --json` reports inodes held, the table's bytes, the daemon's resident memory
  and, per operation, the daemon's time (`latency_OP_count`, `_p50_us`, `_p99_us`): a walk
  shows readdirplus replies, with p50 <= p99. Every counter is a number (scripts subtract two
  snapshots).
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import run_zarrfs
from writing import stats

SIDE, SHARD = 512, 64
FILES = SIDE * SIDE


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> tuple[Path, np.ndarray]:
    import tensorstore as ts

    root = tmp_path_factory.mktemp("many") / "h.zarr"
    root.mkdir()
    (root / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group"}))
    # No zero: a chunk equal to the fill value (0) is not stored.
    data = (np.arange(FILES, dtype=np.uint64) * 7 % 251 + 1).astype(np.uint8).reshape(SIDE, SIDE)
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(root / "a")},
        "metadata": {
            "shape": [SIDE, SIDE],
            "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [SHARD, SHARD]}},
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [1, 1], "codecs": [{"name": "bytes"}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                 {"name": "crc32c"}]}}],
        },
        "create": True,
    }
    ts.open(spec).result().write(data).result()
    return root, data


def test_a_walk_sees_every_file_with_its_size_and_its_bytes(mounter, many):
    root, data = many
    m = mounter(root, "--read-only")
    du = subprocess.run(["du", "-s", "--inodes", str(m.path("a/c"))],
                        capture_output=True, text=True, check=True)
    assert int(du.stdout.split()[0]) == FILES + SIDE + 1, du.stdout  # files, directories
    sizes = subprocess.run(["find", str(m.path("a/c")), "-type", "f", "-printf", "%s\n"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert len(sizes) == FILES and set(sizes) == {"1"}
    for i, j in [(0, 0), (0, 511), (300, 7), (511, 511)]:
        f = m.path(f"a/c/{i}/{j}")
        assert f.stat().st_size == 1
        assert f.read_bytes() == bytes([data[i, j]])


def test_a_walk_keeps_the_inode_table_bounded_and_gives_memory_back(mounter, many):
    root, data = many
    cap = 20_000
    m = mounter(root, "--read-only", "--max-inodes", str(cap))
    peaks = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            peaks.append(stats(m)["inodes_held"])
            done.wait(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        n = 0
        for dirpath, _, files in os.walk(m.path("a/c")):
            for name in files:
                os.stat(os.path.join(dirpath, name))
                n += 1
    finally:
        done.set()
        watcher.join()
    assert n == FILES
    s = stats(m)
    assert s["kernel_forgets_asked"] > 0, s
    # The table is looked at four times a second; a walk adds at most a few directories
    # (512 files each) between two looks.
    assert max(peaks) < 3 * cap, f"inode table peaked at {max(peaks)} for a cap of {cap}"
    assert s["inodes_held"] < 3 * cap, s
    # Forgotten files are looked up and read again.
    for i, j in [(0, 0), (1, 2), (255, 255)]:
        assert m.path(f"a/c/{i}/{j}").read_bytes() == bytes([data[i, j]])
    if os.geteuid() != 0:
        pytest.skip("dropping the kernel's inodes needs root")
    Path("/proc/sys/vm/drop_caches").write_text("2\n")
    settled = [stats(m)]
    for _ in range(50):
        if settled[-1]["inodes_held"] < 100:
            break
        threading.Event().wait(0.1)
        settled.append(stats(m))
    assert settled[-1]["inodes_held"] < 100, settled[-1]
    assert settled[-1]["inode_table_bytes"] < 1 << 20, settled[-1]


def test_stats_report_memory_and_the_daemons_time(mounter, many, zarrfs_bin):
    root, _ = many
    m = mounter(root, "--read-only")
    for name in os.listdir(m.path("a/c/3")):
        os.stat(m.path(f"a/c/3/{name}"))
    s = json.loads(run_zarrfs(zarrfs_bin, "stats", "--json", m.mountpoint).stdout)
    assert s["inodes_held"] >= SIDE, s
    assert s["inode_table_bytes"] >= 64 * s["inodes_held"], s  # an Inode is 64 bytes (fs/inodes/inode.rs)
    assert 1 << 20 < s["daemon_rss_bytes"] < 1 << 30, s
    assert s["latency_readdirplus_count"] >= 1, s
    assert 1 <= s["latency_readdirplus_p50_us"] <= s["latency_readdirplus_p99_us"], s
    assert all(isinstance(v, int) for v in s.values()), "every counter a number"
    text = run_zarrfs(zarrfs_bin, "stats", m.mountpoint).stdout
    assert "inodes held" in text and "daemon time" in text and "readdirplus" in text, text


def test_a_walk_for_names_costs_no_inode_per_file_and_one_that_stats_no_lookup_per_file(mounter, many):
    """`find` and `os.walk` want names only: their listings come without attributes, so the
    kernel builds no inode per file (about four times the cost of the names). A walk that
    stats every file gets the attributes with the listings, past its first directory: a
    LOOKUP per directory, not per file (`fs/walkers.rs`)."""
    root, _ = many
    m = mounter(root, "--read-only")
    before = stats(m)
    assert sum(len(files) for _, _, files in os.walk(m.path("a/c"))) == FILES
    s = stats(m)
    bare = s["listings_without_attributes"] - before["listings_without_attributes"]
    assert bare >= SIDE - 2, s
    assert s["inodes_held"] < FILES // 20, s
    before = s
    n = 0
    for dirpath, _, files in os.walk(m.path("a/c")):
        for name in files:
            assert os.stat(os.path.join(dirpath, name)).st_size == 1
            n += 1
    assert n == FILES
    s = stats(m)
    lookups = s["fuse_lookups"] - before["fuse_lookups"]
    # The first directory's files, then one file and the directory itself per directory.
    assert lookups < FILES // 50, (lookups, s)
    assert s["inodes_held"] >= FILES, s


def test_ls_l_which_stats_each_entry_as_it_reads_it_gets_the_attributes_with_the_listing(mounter, many):
    """`ls -lR` stats each entry as it reads it: the kernel asks for the rest of each listing
    with attributes instead of looking its last file up, which shows the walker stats too."""
    root, _ = many
    m = mounter(root, "--read-only")
    before = stats(m)
    out = subprocess.run(["ls", "-lR", str(m.path("a/c"))], capture_output=True, text=True, check=True).stdout
    assert sum(1 for line in out.splitlines() if line.startswith("-")) == FILES
    s = stats(m)
    lookups = s["fuse_lookups"] - before["fuse_lookups"]
    assert lookups < FILES // 50, (lookups, s)
    assert s["listings_without_attributes"] == before["listings_without_attributes"], s
