"""`--cache DIR`: the disk cache of what reads fetch from a remote source, on real mounts of S3
(moto). A sharded array of 4 MiB (16 uncompressed shards of 16 inner chunks each) is seeded under
a fresh prefix per test and mounted by URL; the array directory of the view is copied with
`cp -r` (every chunk file read) and the copy checked with zarr-python against the data written.

  - a remount with the same cache copies the whole array with no byte fetched from the store,
    byte for byte the first mount's copy;
  - after --metadata-ttl, a HEAD confirms an object before its blocks are served: an unchanged
    object is still read from disk, a changed one (rewritten in the bucket between the mounts) is
    read from the store, new values, never the cached ones;
  - after a kill -9 the records of the crashed mount are not trusted: a remount within the TTL
    confirms with a HEAD and reads an object changed meanwhile from the store;
  - --max-cache-size bounds the block files exactly (least recently used evicted);
  - damaged block files (a flipped byte, a truncation) fail their checks, are dropped and the
    bytes fetched again;
  - one mount per cache directory (a second is refused, nothing mounted); local sources refuse
    --cache;
  - `mount -t fuse.zarrfs ... -o cache=DIR` and `umount`;
  - a writable mount's own writes: it reads them back, and so does a remount with the same
    cache;
  - two sources with the same keys share a cache directory (given relative) without mixing.
"""
from __future__ import annotations

import os
import signal
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import seed_remote as SR
from conftest import run_zarrfs
from helpers import assert_same_array, read_zarr_python, walk_files
from mounting import Mount, find_daemons, mount_entry, on_helper_path, pid_alive, wait_until
from remote import delta, remote, remote_view, settled, settled_at  # noqa: F401 - fixtures

SHAPE, CHUNKS, SHARDS = (1024, 1024), (64, 64), (256, 256)
N_SHARDS = (SHAPE[0] // SHARDS[0]) * (SHAPE[1] // SHARDS[1])        # 16
N_CHUNKS = (SHAPE[0] // CHUNKS[0]) * (SHAPE[1] // CHUNKS[1])        # 256
MiB = 1 << 20


# ---------------------------------------------------------------------------------------------
# the data set


class Dataset:
    """Three versions of one hierarchy (a root group and the sharded array `a`, uint32): `old`
    as seeded, uncompressed; `new` (every element different, same sizes) and `gz` (every
    element different, gzip: other shard sizes and another zarr.json) to rewrite the bucket
    with."""

    def __init__(self, base: Path):
        import zarr

        base.mkdir(parents=True, exist_ok=True)
        n = np.arange(SHAPE[0] * SHAPE[1], dtype=np.uint64)
        self.old = (n * 2654435761 % 4294967291).astype(np.uint32).reshape(SHAPE)
        self.new = self.old ^ np.uint32(0x5A5A5A5A)
        # Compressible, gzip: shards (and the array's zarr.json) of other sizes.
        self.gz = (self.old % 997).astype(np.uint32)
        self.gz[self.gz == self.old] += 997
        self.roots = {}
        for name, data, compressors in (("old", self.old, None), ("new", self.new, None),
                                        ("gz", self.gz, [{"name": "gzip",
                                                          "configuration": {"level": 1}}])):
            root = base / name
            group = zarr.open_group(root, mode="w", zarr_format=3)
            arr = group.create_array("a", shape=SHAPE, dtype="uint32", chunks=CHUNKS,
                                     shards=SHARDS, compressors=compressors, fill_value=0)
            arr[...] = data
            self.roots[name] = root
        self.shard_keys = sorted(k for k in SR.local_files(self.roots["old"]) if k.startswith("a/c/"))
        assert len(self.shard_keys) == N_SHARDS, self.shard_keys
        self.shard_bytes = sum((self.roots["old"] / k).stat().st_size for k in self.shard_keys)
        assert all(not (self.roots["old"] / k).read_bytes() == (self.roots["gz"] / k).read_bytes()
                   for k in self.shard_keys)

    def expected(self, version: str) -> np.ndarray:
        return {"old": self.old, "new": self.new, "gz": self.gz}[version]


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Dataset:
    return Dataset(tmp_path_factory.mktemp("disk-cache-data"))


def seed(remote, ds: Dataset, name: str, version: str = "old") -> str:
    return remote.seed("s3", ds.roots[version], f"disk-cache/{name}")


def reseed(ds: Dataset, prefix: str, version: str) -> None:
    """Rewrite every object of the prefix in the bucket with the given version's bytes (the
    unchanged metadata documents keep their ETags)."""
    for key, path in SR.local_files(ds.roots[version]).items():
        SR.put_object("s3", SR.join_key(prefix, key), path.read_bytes())


# ---------------------------------------------------------------------------------------------
# mounts, copies and block files


def mount_cached(remote_view, prefix: str, cache: Path, *options) -> Mount:
    return remote_view("s3", "--read-only", "--cache", str(cache), *options, prefix=prefix)


def copy_array(m: Mount, dest: Path, n_chunks: int = N_CHUNKS) -> dict[str, bytes]:
    """`cp -r` of the mount's array directory; returns {relative path: bytes} of the copy."""
    res = subprocess.run(["cp", "-r", str(m.path("a")), str(dest)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, f"cp -r failed: {res.stderr}"
    files = {rel: p.read_bytes() for rel, p in walk_files(dest).items()}
    chunks = [rel for rel in files if rel.startswith("c/")]
    assert len(chunks) == n_chunks, f"{len(chunks)} chunk files copied, not {n_chunks}"
    return files


def check_copy(dest: Path, expected: np.ndarray, what: str) -> None:
    assert_same_array(read_zarr_python(dest), expected, what)


def unmount(m: Mount) -> None:
    """Unmount cleanly and wait for the daemon to exit (it writes what waits, and saves the
    known versions, before it does)."""
    pids = set(m.pids) | set(find_daemons(m.binary, m.mountpoint))
    assert pids, "no daemon found for the mount"
    res = subprocess.run(["fusermount3", "-u", str(m.mountpoint)], capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, f"fusermount3 -u: {res.stderr}"
    assert wait_until(lambda: not any(pid_alive(p) for p in pids), 30), "the daemon did not exit"
    assert not m.is_mounted()


def kill_daemon(m: Mount) -> None:
    """kill -9 of the daemon, then clear the dead mount (as the crash tests do)."""
    pids = set(m.pids) | set(find_daemons(m.binary, m.mountpoint))
    assert pids, "no daemon found for the mount"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not any(pid_alive(p) for p in pids), 10), "the daemon survived kill -9"
    m.stop()
    assert not m.is_mounted()


def written_settled(m: Mount, timeout: float = 15) -> dict:
    """The mount's stats once no request is in flight and the background writer has put
    nothing more on disk for a while."""
    deadline = time.monotonic() + timeout
    last = settled(m)
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = settled(m)
        if now["disk_cache_written_bytes"] == last["disk_cache_written_bytes"]:
            return now
        last = now
    return last


def block_files(cache: Path) -> dict[str, Path]:
    """Every file under DIR/blocks, relative path -> path."""
    return walk_files(cache / "blocks") if (cache / "blocks").is_dir() else {}


def crc32c(data: bytes) -> int:
    try:
        import google_crc32c
        return google_crc32c.value(data)
    except ImportError:
        import crc32c as c
        return c.crc32c(data)


def parse_block(data: bytes) -> dict | None:
    """A block file's header and data if it is sound (see src/store/disk_cache/block.rs:
    "ZCB1" | key_len u32 | version_len u32 | block u64 | data_len u32 | key | version | data |
    crc32c u32), else None."""
    if len(data) < 28 or data[:4] != b"ZCB1":
        return None
    key_len, version_len, block, data_len = struct.unpack_from("<IIQI", data, 4)
    end = 24 + key_len + version_len + data_len
    if len(data) != end + 4 or struct.unpack_from("<I", data, end)[0] != crc32c(data[:end]):
        return None
    return {"key": data[24:24 + key_len].decode(errors="replace"),
            "version": data[24 + key_len:24 + key_len + version_len].decode(errors="replace"),
            "block": block, "data_len": data_len}


def shard_block_keys(cache: Path) -> set[str]:
    """The object keys (without the source's name) the sound block files hold."""
    keys = set()
    for p in block_files(cache).values():
        parsed = parse_block(p.read_bytes())
        if parsed:
            keys.add(parsed["key"].split("\n", 1)[-1])
    return keys


# ---------------------------------------------------------------------------------------------
# tests


def test_remount_copies_the_array_from_disk(remote, remote_view, ds, tmp_path, zarrfs_bin):
    prefix = seed(remote, ds, "remount")
    cache = tmp_path / "cache"
    first_mount = mount_cached(remote_view, prefix, cache)
    first = copy_array(first_mount, tmp_path / "copy1")
    s = settled(first_mount)
    assert s["get_bytes"] >= ds.shard_bytes, f"the first mount fetched less than the shards: {s}"
    assert s["disk_cache_misses"] > 0, s
    unmount(first_mount)
    check_copy(tmp_path / "copy1", ds.old, "first mount's copy")
    held = shard_block_keys(cache)
    missing = [k for k in ds.shard_keys if not any(h == k or h.endswith("/" + k) for h in held)]
    assert not missing, f"shards without blocks on disk after unmount: {missing} (held: {sorted(held)})"

    second_mount = mount_cached(remote_view, prefix, cache)
    s0 = settled(second_mount)
    second = copy_array(second_mount, tmp_path / "copy2")
    s1 = settled(second_mount)
    d = delta(s0, s1)
    assert s1["get_bytes"] == 0, f"the remount fetched bytes from the store: {s1}"
    assert d["get"] == 0 and d["head"] == 0, f"the copy sent requests to the store: {d}"
    assert d["disk_cache_misses"] == 0, d
    assert d["disk_cache_hits"] >= N_SHARDS, d
    assert d["disk_cache_hit_bytes"] >= ds.old.nbytes, f"less than the array read from disk: {d}"
    assert s1["disk_cache_written_bytes"] == 0 and s1["disk_cache_dropped_writes"] == 0, s1
    assert second == first, "the remount's copy differs from the first mount's"
    check_copy(tmp_path / "copy2", ds.old, "remount's copy")

    res = run_zarrfs(zarrfs_bin, "stats", second_mount.path())
    assert res.returncode == 0, res.stderr
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("disk cache")), None)
    assert line is not None, f"no disk cache line in zarrfs stats:\n{res.stdout}"
    assert f"{s1['disk_cache_hits']} reads served" in line, line
    res = run_zarrfs(zarrfs_bin, "stats", second_mount.path(), "--json")
    assert res.returncode == 0, res.stderr
    for key in ("disk_cache_hits", "disk_cache_hit_bytes", "disk_cache_misses",
                "disk_cache_revalidations", "disk_cache_bytes", "disk_cache_written_bytes",
                "disk_cache_evictions", "disk_cache_torn", "disk_cache_dropped_writes"):
        assert f'"{key}"' in res.stdout, f"{key} missing from zarrfs stats --json"


def test_after_the_ttl_an_unchanged_object_is_confirmed_then_read_from_disk(
        remote, remote_view, ds, tmp_path):
    prefix = seed(remote, ds, "ttl-unchanged")
    cache = tmp_path / "cache"
    m = mount_cached(remote_view, prefix, cache, "--metadata-ttl", "1")
    first = copy_array(m, tmp_path / "copy1")
    unmount(m)

    m = mount_cached(remote_view, prefix, cache, "--metadata-ttl", "1")
    time.sleep(1.3)
    s0 = settled(m)
    second = copy_array(m, tmp_path / "copy2")
    d = delta(s0, settled(m))
    assert d["disk_cache_revalidations"] >= 1, d
    assert d["head"] >= N_SHARDS, f"not every shard's version was confirmed by a HEAD: {d}"
    assert d["get_bytes"] == 0, f"unchanged shards were fetched again: {d}"
    assert d["disk_cache_hit_bytes"] >= ds.old.nbytes, d
    assert second == first
    check_copy(tmp_path / "copy2", ds.old, "copy after the TTL")


@pytest.mark.parametrize("change", ["new", "gz"])
def test_after_the_ttl_a_changed_object_is_read_from_the_store(remote, remote_view, ds, tmp_path,
                                                               change):
    """`new`: every shard rewritten with other values, same sizes. `gz`: other values, gzip,
    other sizes, and the array's zarr.json changed too."""
    prefix = seed(remote, ds, f"ttl-changed-{change}")
    cache = tmp_path / "cache"
    m = mount_cached(remote_view, prefix, cache, "--metadata-ttl", "1")
    copy_array(m, tmp_path / "copy1")
    unmount(m)
    check_copy(tmp_path / "copy1", ds.old, "first copy")

    reseed(ds, prefix, change)
    changed_bytes = sum((ds.roots[change] / k).stat().st_size for k in ds.shard_keys)
    m = mount_cached(remote_view, prefix, cache, "--metadata-ttl", "1")
    time.sleep(1.3)
    s0 = settled(m)
    copy_array(m, tmp_path / "copy2")
    d = delta(s0, settled(m))
    check_copy(tmp_path / "copy2", ds.expected(change),
               "copy after the bucket changed (stale disk blocks?)")
    assert d["disk_cache_revalidations"] >= 1, d
    assert d["get_bytes"] >= changed_bytes, f"the changed shards were not fetched: {d}"
    unmount(m)

    # What was fetched is kept under the new versions: a third mount within the TTL reads it
    # from disk, the new values.
    m = mount_cached(remote_view, prefix, cache, "--metadata-ttl", "60")
    s0 = settled(m)
    copy_array(m, tmp_path / "copy3")
    d = delta(s0, settled(m))
    check_copy(tmp_path / "copy3", ds.expected(change), "copy from the refilled cache")
    assert d["get_bytes"] == 0 and d["disk_cache_hit_bytes"] >= changed_bytes, d


def test_a_change_shows_within_one_mount_after_the_ttl(remote, remote_view, ds, tmp_path):
    prefix = seed(remote, ds, "ttl-one-mount")
    m = mount_cached(remote_view, prefix, tmp_path / "cache", "--metadata-ttl", "1")
    copy_array(m, tmp_path / "copy1")
    written_settled(m)
    reseed(ds, prefix, "new")
    time.sleep(1.3)
    s0 = settled(m)
    copy_array(m, tmp_path / "copy2")
    d = delta(s0, settled(m))
    check_copy(tmp_path / "copy1", ds.old, "copy before the change")
    check_copy(tmp_path / "copy2", ds.new, "copy after the change and the TTL (stale blocks?)")
    assert d["get_bytes"] >= ds.new.nbytes, d


def test_after_a_crash_records_are_confirmed_before_use(remote, remote_view, ds, tmp_path):
    """Default TTL (60 s). A clean mount fills the cache; a second mount reads from disk and is
    killed (-9): its versions file stays marked unclean. The bucket then changes, and a third
    mount within the TTL must confirm each object before serving blocks: new values."""
    prefix = seed(remote, ds, "crash")
    cache = tmp_path / "cache"
    m = mount_cached(remote_view, prefix, cache)
    copy_array(m, tmp_path / "copy1")
    unmount(m)

    m = mount_cached(remote_view, prefix, cache)
    s0 = settled(m)
    copy_array(m, tmp_path / "copy2")
    d = delta(s0, settled(m))
    assert d["get_bytes"] == 0 and d["disk_cache_hit_bytes"] >= ds.old.nbytes, \
        f"the clean remount did not read from disk: {d}"
    kill_daemon(m)
    check_copy(tmp_path / "copy2", ds.old, "copy of the killed mount")

    # Nothing changed: after the crash each object is confirmed by one HEAD, then read from
    # disk. This mount is killed too (its records stay unconfirmed).
    m = mount_cached(remote_view, prefix, cache)
    copy_array(m, tmp_path / "copy3")
    s = settled(m)
    assert s["get_bytes"] == 0 and s["disk_cache_hit_bytes"] >= ds.old.nbytes, \
        f"unchanged objects were fetched again after the crash: {s}"
    assert N_SHARDS <= s["disk_cache_revalidations"] <= s["head"] <= N_SHARDS + 2, \
        f"not one HEAD per object read (16 shards, 2 metadata documents): {s}"
    kill_daemon(m)
    check_copy(tmp_path / "copy3", ds.old, "copy after the crash")

    reseed(ds, prefix, "new")
    m = mount_cached(remote_view, prefix, cache)
    copy_array(m, tmp_path / "copy4")
    s = settled(m)
    check_copy(tmp_path / "copy4", ds.new, "copy after the crash and the change (stale blocks?)")
    assert s["disk_cache_revalidations"] >= N_SHARDS, s
    assert s["head"] <= N_SHARDS + 2, f"more than one HEAD per object: {s}"
    assert s["get_bytes"] >= ds.new.nbytes, s


def test_a_crash_right_after_the_first_reads(remote, remote_view, ds, tmp_path):
    """kill -9 of the mount that filled the cache, right after reading; the bucket changes; a
    remount within the TTL reads the new values."""
    prefix = seed(remote, ds, "crash-first")
    cache = tmp_path / "cache"
    m = mount_cached(remote_view, prefix, cache)
    copy_array(m, tmp_path / "copy1")
    kill_daemon(m)  # at once: blocks may be half written
    reseed(ds, prefix, "new")
    m = mount_cached(remote_view, prefix, cache)
    copy_array(m, tmp_path / "copy2")
    check_copy(tmp_path / "copy2", ds.new, "copy after the crash and the change (stale blocks?)")
    unmount(m)
    left = sorted(rel for rel in block_files(cache) if not rel.endswith(".zcb"))
    assert not left, f"temporary files of the killed mount left: {left}"
    unsound = [rel for rel, p in block_files(cache).items() if parse_block(p.read_bytes()) is None]
    assert not unsound, f"unsound block files: {unsound}"
    m = mount_cached(remote_view, prefix, cache)
    copy_array(m, tmp_path / "copy3")
    s = settled(m)
    check_copy(tmp_path / "copy3", ds.new, "copy from the cache filled after the crash")
    assert s["get_bytes"] == 0, s


def test_max_cache_size_bounds_the_block_files(remote, remote_view, ds, tmp_path):
    prefix = seed(remote, ds, "evict")
    cache = tmp_path / "cache"
    m = mount_cached(remote_view, prefix, cache, "--max-cache-size", "1M")
    copy_array(m, tmp_path / "copy1")
    s = written_settled(m)
    on_disk = {rel: p.stat().st_size for rel, p in block_files(cache).items()}
    zcb = sum(size for rel, size in on_disk.items() if rel.endswith(".zcb"))
    assert s["disk_cache_written_bytes"] > MiB, s
    assert s["disk_cache_evictions"] > 0, s
    assert s["disk_cache_bytes"] <= MiB, s
    assert zcb == s["disk_cache_bytes"], f"stats say {s['disk_cache_bytes']} held, the files {zcb}"
    assert zcb <= MiB, f"{zcb} bytes of block files over a bound of {MiB}: {on_disk}"
    unmount(m)
    check_copy(tmp_path / "copy1", ds.old, "copy through a small cache")
    on_disk = {rel: p.stat().st_size for rel, p in block_files(cache).items()}
    assert 0 < sum(on_disk.values()) <= MiB, f"after unmount: {on_disk}"
    assert all(rel.endswith(".zcb") for rel in on_disk), f"stray files: {sorted(on_disk)}"

    # A remount with a smaller bound evicts down to it at open; reads stay correct.
    m = mount_cached(remote_view, prefix, cache, "--max-cache-size", "300K")
    copy_array(m, tmp_path / "copy2")
    s = written_settled(m)
    assert s["disk_cache_bytes"] <= 300 << 10, s
    unmount(m)
    total = sum(p.stat().st_size for p in block_files(cache).values())
    assert total <= 300 << 10, f"{total} bytes of block files over a bound of 300K"
    check_copy(tmp_path / "copy2", ds.old, "copy through a smaller cache")


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_block_files_are_dropped_and_fetched_again(remote, remote_view, ds, tmp_path,
                                                           damage):
    prefix = seed(remote, ds, f"torn-{damage}")
    cache = tmp_path / "cache"
    m = mount_cached(remote_view, prefix, cache)
    copy_array(m, tmp_path / "copy1")
    unmount(m)

    damaged = {}
    for rel, p in block_files(cache).items():
        data = bytearray(p.read_bytes())
        assert parse_block(bytes(data)) is not None, f"{rel} unsound before the damage"
        if damage == "flip":
            data[len(data) // 2] ^= 0x01
        else:
            data = data[:len(data) // 2]
        p.write_bytes(bytes(data))
        damaged[rel] = bytes(data)
    assert len(damaged) >= N_SHARDS, sorted(damaged)

    m = mount_cached(remote_view, prefix, cache)
    s0 = settled(m)
    copy_array(m, tmp_path / "copy2")
    s = written_settled(m)
    d = delta(s0, s)
    assert s["disk_cache_torn"] > 0, s
    assert d["get_bytes"] >= ds.old.nbytes, f"the damaged blocks were not fetched again: {d}"
    unmount(m)
    check_copy(tmp_path / "copy2", ds.old, "copy over damaged block files")
    still = [rel for rel, bad in damaged.items()
             if (cache / "blocks" / rel).exists() and (cache / "blocks" / rel).read_bytes() == bad]
    assert not still, f"damaged block files left in place after they were read: {still}"
    unsound = [rel for rel, p in block_files(cache).items() if parse_block(p.read_bytes()) is None]
    assert not unsound, f"unsound block files after the remount: {unsound}"

    # The refetched blocks serve a third mount.
    m = mount_cached(remote_view, prefix, cache)
    s0 = settled(m)
    copy_array(m, tmp_path / "copy3")
    d = delta(s0, settled(m))
    assert d["get_bytes"] == 0 and d["disk_cache_torn"] == 0, d
    check_copy(tmp_path / "copy3", ds.old, "copy from the repaired cache")


def test_one_mount_per_cache_directory(remote, remote_view, ds, tmp_path, zarrfs_bin):
    prefix = seed(remote, ds, "in-use")
    cache = tmp_path / "cache"
    first = mount_cached(remote_view, prefix, cache)
    chunk = (first.path("a") / "c" / "0" / "0").read_bytes()
    second_mp = tmp_path / "second"
    second_mp.mkdir()
    res = subprocess.run([str(zarrfs_bin), "mount", SR.url("s3", prefix), str(second_mp),
                          "--read-only", "--cache", str(cache),
                          "--log-file", str(tmp_path / "second.log")],
                         capture_output=True, text=True, timeout=60, env=Mount.daemon_env())
    try:
        assert res.returncode != 0, f"a second mount of the cache directory succeeded: {res}"
        assert "in use by another mount" in res.stderr, res.stderr
        assert mount_entry(second_mp) is None, "the refused mount is mounted"
        # The refused daemon reports to the command, which exits; the daemon then ends.
        assert wait_until(lambda: not find_daemons(zarrfs_bin, second_mp, helper=True), 10), \
            "a daemon of the refused mount still runs"
    finally:
        if mount_entry(second_mp) is not None:
            subprocess.run(["umount", "-l", str(second_mp)], capture_output=True)
    # The first mount is unharmed, and once it is gone the directory may be mounted again.
    assert first.alive()
    assert (first.path("a") / "c" / "1" / "1").read_bytes() == \
        ds.old[64:128, 64:128].tobytes()
    unmount(first)
    again = mount_cached(remote_view, prefix, cache)
    assert (again.path("a") / "c" / "0" / "0").read_bytes() == chunk == ds.old[:64, :64].tobytes()


def test_cache_with_a_local_source_is_refused(zarrfs_bin, ds, tmp_path):
    mp = tmp_path / "m"
    mp.mkdir()
    res = subprocess.run([str(zarrfs_bin), "mount", str(ds.roots["old"]), str(mp), "--cache",
                          str(tmp_path / "cache"), "--log-file", str(tmp_path / "log")],
                         capture_output=True, text=True, timeout=60, env=Mount.daemon_env())
    try:
        assert res.returncode != 0, res
        assert "applies to remote sources" in res.stderr, res.stderr
        assert mount_entry(mp) is None
    finally:
        if mount_entry(mp) is not None:
            subprocess.run(["umount", "-l", str(mp)], capture_output=True)


def test_mount_t_fuse_zarrfs_with_a_cache(remote, ds, tmp_path, zarrfs_bin):
    """`mount -t fuse.zarrfs s3://... DIR -o read-only,cache=DIR,...`: the helper finds zarrfs
    on its PATH (/usr/local/bin); the S3 endpoint and keys go in the -o list."""
    prefix = seed(remote, ds, "mount-t")
    cache = tmp_path / "cache"
    keys = SR.client_env("s3")
    options = ",".join([
        "read-only", f"cache={cache}", "max-cache-size=64M",
        f"endpoint_url={keys['AWS_ENDPOINT_URL']}", f"region={keys['AWS_REGION']}",
        f"aws_access_key_id={keys['AWS_ACCESS_KEY_ID']}",
        f"aws_secret_access_key={keys['AWS_SECRET_ACCESS_KEY']}", "aws_allow_http=true"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    mps = []
    with on_helper_path(zarrfs_bin):
        try:
            got = []
            for n in range(2):
                mp = tmp_path / f"m{n}"
                mp.mkdir()
                mps.append(mp)
                res = subprocess.run(["mount", "-t", "fuse.zarrfs", SR.url("s3", prefix), str(mp),
                                      "-o", options], capture_output=True, text=True, timeout=60,
                                     env=env)
                assert res.returncode == 0, f"mount -t fuse.zarrfs: {res.stderr}"
                assert mount_entry(mp)["fstype"].startswith("fuse")
                copy = tmp_path / f"copy{n}"
                res = subprocess.run(["cp", "-r", str(mp / "a"), str(copy)], capture_output=True,
                                     text=True, timeout=120)
                assert res.returncode == 0, res.stderr
                check_copy(copy, ds.old, f"copy of mount -t #{n}")
                got.append(settled_at(mp))
                pids = find_daemons(zarrfs_bin, mp, helper=True)
                res = subprocess.run(["umount", str(mp)], capture_output=True, text=True, timeout=30)
                assert res.returncode == 0, f"umount: {res.stderr}"
                assert pids and wait_until(lambda: not any(pid_alive(p) for p in pids), 30), \
                    f"the daemon did not exit after umount: {pids}"
                assert mount_entry(mp) is None
            assert got[0]["disk_cache_misses"] > 0 and got[0]["get_bytes"] >= ds.shard_bytes, got[0]
            assert got[1]["get_bytes"] == 0, f"the second mount -t fetched from the store: {got[1]}"
            assert got[1]["disk_cache_hit_bytes"] >= ds.old.nbytes, got[1]
        finally:
            for mp in mps:
                if mount_entry(mp) is not None:
                    subprocess.run(["umount", "-l", str(mp)], capture_output=True)


def test_a_writable_mounts_writes_are_read_back_after_a_remount(remote, remote_view, ds,
                                                               tmp_path):
    """A writable mount with the cache full of the array's old versions overwrites chunk c/0/0
    with the bytes of c/1/1 and removes c/4/4 (another shard): it reads back what it wrote once
    committed, and so does a remount with the same cache (within the TTL), which fetches only
    the two written shards."""
    prefix = seed(remote, ds, "write")
    cache = tmp_path / "cache"
    m = remote_view("s3", "--cache", str(cache), prefix=prefix)
    copy_array(m, tmp_path / "before")  # every shard's blocks in the cache, the old versions
    check_copy(tmp_path / "before", ds.old, "copy before the writes")
    written_settled(m)
    chunks = m.path("a") / "c"
    new_bytes = (chunks / "1" / "1").read_bytes()
    assert (chunks / "0" / "0").read_bytes() == ds.old[:64, :64].tobytes() != new_bytes
    s0 = settled(m)
    with open(chunks / "0" / "0", "r+b") as f:
        f.write(new_bytes)
        f.flush()
        os.fsync(f.fileno())
    os.unlink(chunks / "4" / "4")
    fd = os.open(chunks / "4", os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    assert wait_until(lambda: settled(m)["shard_commits"] - s0["shard_commits"] >= 2, 15), \
        f"the writes were not committed: {delta(s0, settled(m))}"
    expected = ds.old.copy()
    expected[:64, :64] = ds.old[64:128, 64:128]
    expected[256:320, 256:320] = 0
    copy_array(m, tmp_path / "after", N_CHUNKS - 1)
    check_copy(tmp_path / "after", expected, "the writing mount's copy after its commits")
    assert not (tmp_path / "after" / "c" / "4" / "4").exists()
    unmount(m)

    m = mount_cached(remote_view, prefix, cache)
    assert (m.path("a") / "c" / "0" / "0").read_bytes() == new_bytes, \
        "the remount with the same cache reads the chunk as it was before the write"
    assert not (m.path("a") / "c" / "4" / "4").exists(), "the removed chunk is back"
    copy_array(m, tmp_path / "remount", N_CHUNKS - 1)
    check_copy(tmp_path / "remount", expected, "copy after the writes, remounted")
    # The rest came from disk: the writing mount read its two shards again after committing
    # them, and kept them; at most those two are fetched.
    s = settled(m)
    shard_size = (ds.roots["old"] / "a/c/0/0").stat().st_size
    assert s["get_bytes"] <= 2 * shard_size, f"more than the written shards fetched: {s}"
    assert s["disk_cache_hit_bytes"] >= ds.old.nbytes - 2 * shard_size, s


def test_one_cache_directory_for_two_sources(remote, remote_view, ds, tmp_path, monkeypatch):
    """Two prefixes with the same keys (other values) share a cache directory, given as a
    relative path: each mount reads its own source's bytes, from disk once cached."""
    first, second = seed(remote, ds, "two-a"), seed(remote, ds, "two-b", "new")
    monkeypatch.chdir(tmp_path)
    for n, (prefix, expected) in enumerate([(first, ds.old), (second, ds.new),
                                            (first, ds.old), (second, ds.new)]):
        m = mount_cached(remote_view, prefix, Path("rel-cache"))
        copy_array(m, tmp_path / f"copy{n}")
        s = settled(m)
        unmount(m)
        check_copy(tmp_path / f"copy{n}", expected, f"mount #{n} of {prefix}")
        if n >= 2:
            assert s["get_bytes"] == 0, f"mount #{n} fetched what the cache holds: {s}"
        else:
            assert s["get_bytes"] >= ds.shard_bytes, f"mount #{n} served another source's bytes: {s}"
    assert len(block_files(tmp_path / "rel-cache")) >= 2 * N_SHARDS
