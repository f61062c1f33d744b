"""The kernel's page cache across opens. A read-only mount of a local source reads files without
opening them (FUSE_NO_OPEN_SUPPORT): the kernel keeps their pages and drops them when a file's
size or time changes. Other read-only mounts keep a reopened file's pages (FOPEN_KEEP_CACHE)
when its bytes are exactly those the previous reader found (same shard version and place).
Either way a warm re-read sends no READ (and, without opens, no OPEN) to the daemon, and any
change, by another mount or by a writer of the source, is seen within the metadata TTL. A
writable mount keeps pages the same way for files nobody writes through it; a file written
through it (and every handle that can write) is FOPEN_DIRECT_IO, on an inode of its own: every
read of it reaches the daemon (see src/fs/inodes/caching.rs)."""
import errno
import json
import os
import subprocess
import time

import numpy as np
import pytest

import shardindex as si
from writing import build, delta, mount_writable, payload_spec, stats

TTL_WAIT = 1.5  # seconds: past the default metadata TTL (1 s) and the kernel's attribute TTL


def read_whole(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_a_warm_reread_of_an_unchanged_chunk_sends_no_read(view, tree):
    entry = next(e for e in tree.arrays("sharded") if e["path"].startswith("zp/"))
    layout = si.load_layout(tree.root / entry["path"])
    key, data = sorted(si.expected_chunk_files(layout).items())[0]
    path = view.path(f"{entry['path']}/{key}")
    assert read_whole(path) == data
    before = stats(view)
    for _ in range(3):
        assert read_whole(path) == data
    d = delta(before, stats(view))
    assert d["fuse_opens"] == 0, f"a read-only local mount opened files: {d}"
    assert d["fuse_reads"] == 0, f"a warm re-read reached the daemon: {d}"


def test_a_writable_mount_answers_every_read_of_a_file_it_wrote_itself(mounter, tmp_path):
    """Files written through a writable mount are FOPEN_DIRECT_IO: the kernel keeps no pages
    of them, whose zero-filled ends could outlive a rewrite (see test_read_races.py); a re-read
    is one READ for the bytes and one for the end of the file, and closing a reader sends no
    flush."""
    spec = payload_spec("arr", shape=(8, 8), shard=(8, 8))
    root = tmp_path / "src"
    build(root, [spec])
    m = mount_writable(mounter, root)
    key = si.chunk_key((0, 0), spec.cke)
    os.makedirs(m.path(f"arr/{os.path.dirname(key)}"), exist_ok=True)
    m.path(f"arr/{key}").write_bytes(b"A" * 16)
    assert read_whole(m.path(f"arr/{key}")) == b"A" * 16
    before = stats(m)
    for _ in range(3):
        assert read_whole(m.path(f"arr/{key}")) == b"A" * 16
    d = delta(before, stats(m))
    assert d["fuse_opens"] == 3, d
    assert 3 <= d["fuse_reads"] <= 6, f"each re-read should reach the daemon: {d}"
    assert d["fuse_flushes"] == 0, f"closing a reader sent a flush: {d}"


def cached_chunk(mounter, tmp_path):
    """A writable mount of a fresh array, one of its chunk files (written by zarr-python, not
    through the mount), and that chunk's bytes, read once through the mount."""
    import zarr
    import fixtures as fx
    root = tmp_path / "src"
    root.mkdir()
    data = np.arange(32 * 32, dtype="int16").reshape(32, 32)
    spec = fx.ArraySpec("a", fx.ZARR_PY, data.shape, "int16", (16, 16), [fx.c_bytes()],
                        [fx.Level((4, 4), "end")], holes=0.0)
    fx.write_zarr_python(root, spec, data)
    m = mount_writable(mounter, root)
    key, chunk = sorted(si.expected_chunk_files(si.load_layout(root / "a")).items())[0]
    assert read_whole(m.path(f"a/{key}")) == chunk
    return root, m, key, chunk


def test_a_writable_mount_rereads_files_nobody_writes_from_the_page_cache(mounter, tmp_path):
    """Chunk files nobody writes through the mount are read through the kernel's page cache,
    as on a read-only mount: a warm re-read sends no READ to the daemon (direct I/O sent one
    or two per re-read)."""
    root, m, key, chunk = cached_chunk(mounter, tmp_path)
    before = stats(m)
    for _ in range(3):
        assert read_whole(m.path(f"a/{key}")) == chunk
    d = delta(before, stats(m))
    assert d["fuse_reads"] == 0, f"a warm re-read on a writable mount reached the daemon: {d}"


@pytest.mark.parametrize("grow", [0, -8, 4000], ids=["same-size", "smaller", "larger"])
def test_a_cached_file_rewritten_through_the_mount_reads_back_its_new_bytes(mounter, tmp_path, grow):
    """Writing over a chunk the kernel has cached (O_TRUNC, then one write) moves the name to a
    direct inode: the writer's bytes are read back at once, whole, by a new reader, while a
    reader opened before keeps reading the bytes it opened."""
    root, m, key, chunk = cached_chunk(mounter, tmp_path)
    path = m.path(f"a/{key}")
    size = len(chunk) + grow
    new = bytes((i * 7 + 3) % 251 + 1 for i in range(size))
    with open(path, "rb", buffering=0) as old_reader:
        assert old_reader.read(16) == chunk[:16]
        with open(path, "r+b", buffering=0) as f:
            f.truncate(0)
            f.write(new)
        assert read_whole(path) == new
        assert os.stat(path).st_size == size
        rest = old_reader.read()
        assert rest == chunk[16:], "a reader opened before the write saw bytes of neither version"
    assert read_whole(path) == new
    path.write_bytes(new[::-1])
    assert read_whole(path) == new[::-1]
    os.truncate(path, 10)
    assert read_whole(path) == new[::-1][:10]
    assert os.stat(path).st_size == 10


def test_a_cached_file_replaced_by_rename_and_unlink_through_the_mount(mounter, tmp_path):
    root, m, key, chunk = cached_chunk(mounter, tmp_path)
    path = m.path(f"a/{key}")
    tmp = m.path("a/tmp-chunk")
    tmp.write_bytes(b"R" * 40)
    os.rename(tmp, path)
    assert read_whole(path) == b"R" * 40
    assert read_whole(path) == b"R" * 40
    os.unlink(path)
    assert not os.path.exists(path)
    path.write_bytes(b"U" * 24)
    assert read_whole(path) == b"U" * 24


@pytest.mark.parametrize("grow", [0, 24], ids=["same-size", "other-size"])
def test_a_cached_file_changed_by_another_writable_mount_is_read_afresh(mounter, tmp_path, grow):
    """Another mount writes the chunk a writable mount has cached: after the metadata TTL the
    reader sees the new bytes, whole."""
    root, m, key, chunk = cached_chunk(mounter, tmp_path)
    assert read_whole(m.path(f"a/{key}")) == chunk
    other = mount_writable(mounter, root)
    new = bytes((i * 5 + 1) % 251 + 1 for i in range(len(chunk) + grow))
    other.path(f"a/{key}").write_bytes(new)
    time.sleep(TTL_WAIT)
    assert read_whole(m.path(f"a/{key}")) == new, "stale pages served"
    assert read_whole(m.path(f"a/{key}")) == new


def test_a_large_chunk_read_without_opens_is_one_version(mounter, tmp_path):
    """A chunk larger than one kernel read, on a mount that does not open files: every byte
    read matches the source, in one piece and in ranges."""
    import fixtures as fx
    root = tmp_path / "src"
    root.mkdir()
    data = np.random.default_rng(5).integers(0, 255, (1024, 1024)).astype("uint8")
    spec = fx.ArraySpec("big", fx.ZARR_PY, data.shape, "uint8", (1024, 1024), [fx.c_bytes()],
                        [fx.Level((512, 512), "end")], holes=0.0)
    fx.write_zarr_python(root, spec, data)
    m = mounter(root, "--read-only")
    expected = si.expected_chunk_files(si.load_layout(root / "big"))
    key, chunk = sorted(expected.items())[0]
    assert len(chunk) == 512 * 512
    assert read_whole(m.path(f"big/{key}")) == chunk
    with open(m.path(f"big/{key}"), "rb", buffering=0) as f:
        f.seek(300_000)
        assert f.read(1000) == chunk[300_000:301_000]
    assert stats(m)["fuse_opens"] == 0


def test_a_chunk_changed_by_another_mount_is_read_afresh(mounter, tmp_path):
    spec = payload_spec("arr", shape=(8, 8), shard=(8, 8))
    root = tmp_path / "src"
    build(root, [spec])
    reader, writer = mount_writable(mounter, root), mount_writable(mounter, root)
    key = si.chunk_key((0, 0), spec.cke)
    for m in (reader, writer):
        os.makedirs(m.path(f"arr/{os.path.dirname(key)}"), exist_ok=True)
    writer.path(f"arr/{key}").write_bytes(b"A" * 16)
    time.sleep(TTL_WAIT)
    assert read_whole(reader.path(f"arr/{key}")) == b"A" * 16
    assert read_whole(reader.path(f"arr/{key}")) == b"A" * 16  # kept: same bytes
    writer.path(f"arr/{key}").write_bytes(b"B" * 16)
    time.sleep(TTL_WAIT)
    before = stats(reader)
    assert read_whole(reader.path(f"arr/{key}")) == b"B" * 16, "stale pages served"
    assert delta(before, stats(reader))["fuse_reads"] >= 1


def test_a_chunk_rewritten_in_the_source_is_read_afresh(mounter, tmp_path):
    import zarr
    import fixtures as fx
    root = tmp_path / "src"
    root.mkdir()
    data = np.arange(32 * 32, dtype="int16").reshape(32, 32)
    spec = fx.ArraySpec("a", fx.ZARR_PY, data.shape, "int16", (16, 16), [fx.c_bytes()],
                        [fx.Level((4, 4), "end")], holes=0.0)
    fx.write_zarr_python(root, spec, data)
    m = mounter(root, "--read-only")
    layout = si.load_layout(root / "a")
    key, first = sorted(si.expected_chunk_files(layout).items())[0]
    assert read_whole(m.path(f"a/{key}")) == first
    assert read_whole(m.path(f"a/{key}")) == first
    zarr.open_array(str(root / "a"), mode="r+")[...] = data + 1  # same sizes, new bytes
    second = si.expected_chunk_files(si.load_layout(root / "a"))[key]
    assert second != first
    time.sleep(TTL_WAIT)
    assert read_whole(m.path(f"a/{key}")) == second, "stale pages served after the TTL"


def test_a_long_listing_asks_the_daemon_for_no_extended_attributes(mounter, tree):
    """`ls -l` asks for two extended attributes per file; without --xattr the first request is
    answered ENOSYS and the kernel asks no more, so the listing costs no round trip per file.
    With --xattr, `user.zarrfs.source` names where a chunk's bytes live."""
    entry = next(e for e in tree.arrays("sharded") if e["path"].startswith("zp/"))
    plain = mounter(tree.root, "--read-only")
    listing = subprocess.run(["ls", "-lR", plain.path(entry["path"])], capture_output=True,
                             text=True, check=True).stdout
    files = [line for line in listing.splitlines() if line.startswith("-")]
    assert len(files) >= 4, listing
    before = stats(plain)
    subprocess.run(["ls", "-lR", plain.path()], capture_output=True, check=True)
    d = delta(before, stats(plain))
    assert d["fuse_getxattrs"] == 0, f"a long listing asked for attributes: {d}"
    layout = si.load_layout(tree.root / entry["path"])
    key = sorted(si.expected_chunk_files(layout))[0]
    with pytest.raises(OSError) as e:
        os.getxattr(plain.path(f"{entry['path']}/{key}"), "user.zarrfs.source")
    assert e.value.errno == errno.EOPNOTSUPP

    with_xattr = mounter(tree.root, "--read-only", "--xattr")
    source = os.getxattr(with_xattr.path(f"{entry['path']}/{key}"), "user.zarrfs.source").decode()
    assert source.startswith(f"shard {entry['path']}/") and " offset " in source, source
    assert json.loads(os.getxattr(with_xattr.path(), "user.zarrfs.stats")).keys() == stats(with_xattr).keys()
