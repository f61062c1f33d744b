"""A local source is watched (no --metadata-ttl given): the kernel keeps what it was given
until the source changes, so a walk repeated after the old 1 s TTL costs no lookup, and a
change made beside the mount shows at once. A writable mount's own changes are not taken for
others': what it just made keeps its inode. A TTL given on the command line, or a source on a
filesystem whose changes raise no event here (another FUSE mount), keeps the TTL."""
import os
import shutil
import time

import pytest

import numpy as np

from helpers import assert_same_array, file_refaults, mount_stats, read_zarr_python, walk_files

OLD_TTL = 1.0  # the TTL a local source had before it was watched


def write(root, data, path="a"):
    import zarr
    arr = zarr.create_array(str(root / path), shape=data.shape, chunks=(4, 4), shards=(8, 8),
                            dtype=data.dtype, fill_value=0)
    arr[...] = data
    return arr


def stat_walk(root) -> int:
    """Stat every file below `root`; how many."""
    n = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            os.stat(os.path.join(dirpath, name))
            n += 1
    return n


def reads(path, want) -> bool:
    """zarr-python reads `want` at `path` (an error counts as not yet)."""
    try:
        return np.array_equal(read_zarr_python(path), want)
    except OSError:
        return False


def until(predicate, timeout=5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize("options", [("--read-only",), ()], ids=["read-only", "writable"])
def test_a_repeated_walk_costs_no_lookup_and_changes_show(mounter, tmp_path, options):
    import zarr
    src = tmp_path / "src"
    zarr.open_group(str(src), mode="w")
    data = np.arange(16 * 16, dtype="int16").reshape(16, 16)
    write(src, data)
    m = mounter(src, *options)
    stats = mount_stats(m.path())
    assert stats["source_watched"] is True
    files = stat_walk(m.path())
    assert files == 16 + 2  # 16 chunk files, the group's and the array's zarr.json
    time.sleep(OLD_TTL * 1.5)
    before, refaults = mount_stats(m.path()), file_refaults()
    assert stat_walk(m.path()) == files
    after, refaulted = mount_stats(m.path()), file_refaults() - refaults
    d = {k: after[k] - before[k] for k in ("fuse_lookups", "fuse_readdirs", "fuse_opendirs", "kernel_listings_kept")}
    assert d["fuse_lookups"] == 0, f"the kernel asked again: {d}"
    # Every directory opened (and the root, by `zarrfs stats`) is answered "keep what you
    # listed"; the kernel then lists it from its pages, unless the machine reclaimed one (a
    # listing taken again is up to three READDIRs, and its page comes back as a refault).
    assert d["kernel_listings_kept"] == d["fuse_opendirs"] == 7 + 1, f"a listing was not kept: {d}"
    assert d["fuse_readdirs"] <= 3 * refaulted, f"the kernel listed again ({refaulted} pages refaulted): {d}"

    # Changed beside the mount: a shard rewritten, a new array, an attribute.
    new = data.copy()
    new[:8, :8] = -1
    zarr.open_array(str(src / "a"), mode="r+")[:8, :8] = -1
    write(src, np.full((4, 4), 5, dtype="int16"), path="b")
    zarr.open_group(str(src), mode="r+").attrs["title"] = "changed"
    assert until(lambda: (m.path("b")).exists()), "a new array did not show"
    # Until the batch is handled (tens of ms) a reader of the old inode may get ESTALE.
    assert until(lambda: reads(m.path("a"), new)), "the rewrite did not show"
    assert_same_array(read_zarr_python(m.path("a")), new, "after the rewrite")
    assert_same_array(read_zarr_python(m.path("b")), np.full((4, 4), 5, dtype="int16"), "new array")
    assert zarr.open_group(str(m.path()), mode="r").attrs["title"] == "changed"
    assert until(lambda: mount_stats(m.path())["source_changes"] >= 1)
    assert mount_stats(m.path())["source_change_names_dropped"] >= 1

    # Removed beside the mount: gone from the mount.
    for path in sorted(walk_files(src / "b").values(), reverse=True):
        path.unlink()
    for dirpath, dirs, _ in os.walk(src / "b", topdown=False):
        os.rmdir(dirpath)
    assert until(lambda: not m.path("b").exists()), "a removed array stayed"
    assert "b" not in os.listdir(m.path())


@pytest.mark.parametrize("options", [("--read-only",), ()], ids=["read-only", "writable"])
def test_a_sparse_arrays_missing_chunks_are_looked_up_once_until_written(mounter, tmp_path, options):
    """An absent chunk is a lookup answered "missing" (zarr-python reads it as the fill
    value): the kernel keeps that answer, so reading the array again asks nothing for it. A
    chunk another writer adds beside the mount (in a shard, and a chunk row, that did not
    exist) shows at once all the same."""
    import zarr
    src = tmp_path / "src"
    zarr.open_group(str(src), mode="w")
    data = np.zeros((16, 16), dtype="int16")
    data[:4, :4] = np.arange(16).reshape(4, 4) + 1
    write(src, data)  # one chunk of 16 stored
    m = mounter(src, *options)
    assert_same_array(read_zarr_python(m.path("a")), data, "cold")
    assert not m.path("a/c/3/3").exists() and not m.path("a/c/0/1").exists()
    before = mount_stats(m.path())
    assert_same_array(read_zarr_python(m.path("a")), data, "warm")
    after = mount_stats(m.path())
    assert after["fuse_lookups"] == before["fuse_lookups"], "missing chunks were looked up again"
    # c/0/1, c/0/2, c/0/3 and the rows c/1, c/2, c/3 (their chunks are below them)
    assert after["missing_names_kept"] >= 6, after

    zarr.open_array(str(src / "a"), mode="r+")[12:, 12:] = 7
    zarr.open_array(str(src / "a"), mode="r+")[:4, 4:8] = 9
    data[12:, 12:] = 7
    data[:4, 4:8] = 9
    assert until(lambda: reads(m.path("a"), data)), "chunks added beside the mount did not show"
    assert (m.path("a/c/3/3")).exists() and (m.path("a/c/0/1")).exists()

    # A name kept missing above what appears: a group made two levels down.
    assert not m.path("later").exists()
    zarr.open_group(str(src / "later" / "deep"), mode="w")
    assert until(lambda: m.path("later/deep/zarr.json").exists()), "a group below a missing name did not show"


def test_a_writable_mounts_own_changes_are_not_taken_for_others(mounter, tmp_path):
    """What the mount makes (groups, arrays, chunks, removals) raises events it must leave out:
    taken as changes, they would drop the names it just made from the kernel, and the next
    lookup would give them new inode numbers (shutil.rmtree then refuses, as zarr-python's
    hierarchy tests found). Another mount of the same source sees them at once."""
    import zarr
    src = tmp_path / "src"
    zarr.open_group(str(src), mode="w")
    m = mounter(src)
    watcher = mounter(src, "--read-only")
    assert mount_stats(m.path())["source_watched"] is True
    root = zarr.open_group(str(m.path()), mode="r+")
    root.create_group("g").create_group("h")
    data = np.arange(16 * 16, dtype="int16").reshape(16, 16)
    write(m.path(), data, path="g/h/a")
    os.mkdir(m.path("g/empty"))
    inos = {p: os.stat(m.path(p)).st_ino for p in ("g", "g/h", "g/h/a", "g/h/a/c", "g/empty")}
    time.sleep(0.5)  # many times the watch's batching
    assert {p: os.stat(m.path(p)).st_ino for p in inos} == inos, "the mount's own changes renumbered it"
    stats = mount_stats(m.path())
    assert stats["source_changes"] == 0 and stats["source_change_names_dropped"] == 0, stats
    assert until(lambda: reads(watcher.path("g/h/a"), data)), "another mount did not see the writes"

    # Removed through the mount: the way zarr-python removes a node.
    shutil.rmtree(m.path("g/h"))
    assert not m.path("g/h").exists()
    assert until(lambda: not watcher.path("g/h").exists()), "another mount kept the removed group"
    # Changed beside the writable mount: shows.
    write(src, np.full((4, 4), 7, dtype="int16"), path="b")
    assert until(lambda: reads(m.path("b"), np.full((4, 4), 7, dtype="int16"))), "a change beside did not show"
    assert until(lambda: mount_stats(m.path())["source_changes"] >= 1)


def test_a_ttl_given_is_kept(mounter, tmp_path):
    src = tmp_path / "src"
    write(src, np.ones((8, 8), dtype="uint8"))
    assert mount_stats(mounter(src, "--metadata-ttl", "1").path())["source_watched"] is False
    m = mounter(src, "--read-only", "--metadata-ttl", "1")
    assert mount_stats(m.path())["source_watched"] is False
    stat_walk(m.path())
    time.sleep(OLD_TTL * 1.5)
    before = mount_stats(m.path())
    stat_walk(m.path())
    assert mount_stats(m.path())["fuse_lookups"] > before["fuse_lookups"], "entries outlived the TTL"


def test_a_source_without_change_events_keeps_the_ttl(mounter, tmp_path):
    """A source on another FUSE mount (as on NFS, changes may come from elsewhere): not
    watched, and its changes still show within the TTL."""
    src = tmp_path / "src"
    data = np.ones((8, 8), dtype="uint8")
    write(src, data)
    below = mounter(src)
    m = mounter(below.path(), "--read-only")
    assert mount_stats(m.path())["source_watched"] is False
    assert "on a" in m.log_tail(200) and "raise no event" in m.log_tail(200)
    assert_same_array(read_zarr_python(m.path("a")), data, "through two mounts")
    import zarr
    zarr.open_array(str(below.path("a")), mode="r+")[...] = 3
    assert until(lambda: read_zarr_python(m.path("a"))[0, 0] == 3), "a change did not show"
    m.stop()  # before the mount below it
