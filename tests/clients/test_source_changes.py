"""Changes of the source under a live mount (DESIGN §5: caches are keyed by shard version, a
rewritten shard is never served stale, ranged reads never run past a shrunken shard). The
view must follow within a few seconds (the default metadata TTL is 1 s)."""
import errno
import os
import time

import numpy as np
import pytest

import fixtures as fx
import shardindex as si
from helpers import assert_same_array, read_file_errno, read_zarr_python, walk_files

SETTLE = 10  # seconds the view may take to follow a change of the source


def write_array(root, data, location="end", path="a"):
    spec = fx.ArraySpec(path, fx.ZARR_PY, data.shape, str(data.dtype), (16, 16), [fx.c_bytes()],
                        [fx.Level((4, 4), location)], holes=0.0)
    fx.write_zarr_python(root, spec, data)


def rewrite(root, data, path="a"):
    import zarr
    zarr.open_array(str(root / path), mode="r+")[...] = data


def view_matches_source(mount, root, path="a") -> bool:
    """The view's chunk files are exactly the source's inner chunks (a file listed but gone
    by the time it is read counts as not yet matching)."""
    expected = si.expected_chunk_files(si.load_layout(root / path))
    try:
        shown = {k: p.read_bytes() for k, p in walk_files(mount.path(path)).items()
                 if k != "zarr.json"}
    except FileNotFoundError:
        return False
    return shown == expected


def settle(predicate) -> bool:
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.25)
    return predicate()


@pytest.fixture
def source(tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    return root


def test_rewritten_shards_are_seen(mounter, source):
    """New data written into the shards shows in the view: chunk files and client reads."""
    rng = np.random.default_rng(3)
    first = rng.integers(1, 1000, (32, 32)).astype("int16")
    write_array(source, first)
    m = mounter(source)
    assert_same_array(read_zarr_python(m.path("a")), first, "before")
    second = first.copy()
    second[:16, :16] = rng.integers(1, 1000, (16, 16))   # one shard, same sizes
    second[16:, 16:] = 0                                  # one shard emptied
    second[20:24, 0:4] = 0                                # one inner chunk emptied
    rewrite(source, second)
    assert settle(lambda: view_matches_source(m, source)), "view did not follow the rewrite"
    assert_same_array(read_zarr_python(m.path("a")), second, "after")


def test_new_shard_appears_and_removed_shard_vanishes(mounter, source):
    data = np.zeros((32, 32), dtype="int16")
    data[:16, :16] = 7
    write_array(source, data)
    m = mounter(source)
    assert view_matches_source(m, source)
    data[16:, 16:] = 9
    rewrite(source, data)
    assert settle(lambda: m.path("a/c/7/7").exists()), "chunk of a new shard did not appear"
    (source / "a" / "c" / "0" / "0").unlink()
    assert settle(lambda: not m.path("a/c/0/0").exists()), "chunk of a removed shard remains"
    data[:16, :16] = 0
    assert_same_array(read_zarr_python(m.path("a")), data, "after removal")


def test_shard_truncated_after_mount_gives_eio(mounter, source):
    """A shard cut short after its index was read: the chunk whose range is gone reads as EIO
    (never as short or shifted bytes); other chunks of that shard read as EIO or exactly,
    chunks of other shards exactly."""
    data = np.arange(1, 32 * 32 + 1, dtype="int16").reshape(32, 32)
    write_array(source, data, location="start")
    m = mounter(source)
    before = {k: p.read_bytes() for k, p in walk_files(m.path("a")).items()}
    shard = source / "a" / "c" / "0" / "0"
    layout = si.load_layout(source / "a")
    raw = shard.read_bytes()
    entries = si.read_index(raw, 16, layout.levels[0])
    last = max(range(16), key=lambda i: entries[i][0])
    shard.write_bytes(raw[:-5])
    key = f"c/{last // 4}/{last % 4}"
    time.sleep(2)
    content, err = read_file_errno(m.path("a") / key)
    assert err == errno.EIO, f"{key}: expected EIO, read {None if content is None else len(content)} bytes"
    for other in before:
        if other.startswith("c/") and other != key:
            content, err = read_file_errno(m.path("a") / other)
            same_shard = all(int(c) < 4 for c in other.split("/")[1:])
            assert content == before[other] or (same_shard and err == errno.EIO), (other, err)
    assert m.alive()


@pytest.mark.parametrize("change", ["emptied", "rewritten"])
def test_chunk_changed_under_reader_is_never_short(mounter, source, change):
    """An inner chunk that is emptied (its index entry becomes empty) or rewritten with other
    bytes in the source, while a reader holds it open or has just looked it up: every read
    returns the old bytes or the new bytes whole, or fails (ENOENT, ESTALE, EIO); never an
    empty or partial file."""
    data = np.arange(1, 32 * 32 + 1, dtype="int16").reshape(32, 32)
    write_array(source, data)
    m = mounter(source)
    p = m.path("a/c/5/0")
    old = p.read_bytes()
    fd = os.open(p, os.O_RDONLY)
    try:
        data[20:24, 0:4] = 0 if change == "emptied" else -data[20:24, 0:4]
        rewrite(source, data)
        new = si.expected_chunk_files(si.load_layout(source / "a")).get("c/5/0")
        allowed = {old} | ({new} if new is not None else set())
        errors = (errno.ENOENT, errno.ESTALE, errno.EIO)
        outcomes = []
        for _ in range(6):
            try:
                outcomes.append(("fd", os.pread(fd, 4096, 0)))
            except OSError as e:
                outcomes.append(("fd", e.errno))
            content, err = read_file_errno(p)
            outcomes.append(("path", content if err is None else err))
            time.sleep(0.3)
    finally:
        os.close(fd)
    bad = [(how, v if isinstance(v, int) else f"{len(v)} bytes") for how, v in outcomes
           if not (v in errors if isinstance(v, int) else v in allowed)]
    assert bad == [], (f"reads after the chunk was {change} (old {len(old)} bytes, new "
                       f"{None if new is None else len(new)}): {bad}")
