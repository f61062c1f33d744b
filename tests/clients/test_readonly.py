"""Assertion 5: every mutation through the view fails with EROFS and changes nothing, on chunk
files of sharded arrays, rewritten zarr.json files, unsharded arrays and non-Zarr files."""
import errno
import itertools
import os

import pytest

import shardindex as si

ARRAY = "zp/u8_1d_end_crc_gzip"          # sharded, default "/" keys
DOT_ARRAY = "zp/i16_2d_start_nocrc_blosc_dot"  # sharded, "." keys


def a_chunk(tree, path=ARRAY) -> str:
    """A chunk key of the view of `path` (relative to the mount)."""
    files = si.expected_chunk_files(si.load_layout(tree.root / path))
    return f"{path}/{sorted(files)[0]}"


def targets(tree) -> dict[str, str]:
    return {
        "chunk": a_chunk(tree),
        "dot_chunk": a_chunk(tree, DOT_ARRAY),
        "sharded_zarr_json": f"{ARRAY}/zarr.json",
        "unsharded_chunk": "zp/unsharded_2d/c/0/0",
        "group_zarr_json": "zp/zarr.json",
        "readme": "README.txt",
    }


def assert_erofs(call, *args):
    with pytest.raises(OSError) as info:
        call(*args)
    assert info.value.errno == errno.EROFS, f"{call.__name__}{args}: {info.value}"


TARGETS = ["chunk", "dot_chunk", "sharded_zarr_json", "unsharded_chunk", "group_zarr_json", "readme"]


@pytest.mark.parametrize("target", TARGETS)
def test_open_for_writing_is_erofs(view, frozen_source, target):
    """open(O_WRONLY) / open(O_RDWR) fail with EROFS, or if the open succeeds the write does."""
    p = view.path(targets(frozen_source)[target])
    before = p.read_bytes()
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_APPEND):
        try:
            fd = os.open(p, flags)
        except OSError as e:
            assert e.errno == errno.EROFS, f"open {flags:#o}: {e}"
            continue
        try:
            assert_erofs(os.write, fd, b"xyz")
        finally:
            os.close(fd)
    assert p.read_bytes() == before


@pytest.mark.parametrize("target", TARGETS)
def test_truncate_is_erofs(view, frozen_source, target):
    p = view.path(targets(frozen_source)[target])
    before = p.read_bytes()
    assert_erofs(os.truncate, p, 0)
    with pytest.raises(OSError) as info:
        os.open(p, os.O_WRONLY | os.O_TRUNC)
    assert info.value.errno == errno.EROFS
    assert p.read_bytes() == before


@pytest.mark.parametrize("target", TARGETS)
def test_unlink_is_erofs(view, frozen_source, target):
    p = view.path(targets(frozen_source)[target])
    assert_erofs(os.unlink, p)
    assert p.is_file()


@pytest.mark.parametrize("target", TARGETS)
def test_rename_is_erofs(view, frozen_source, target):
    p = view.path(targets(frozen_source)[target])
    assert_erofs(os.rename, p, str(p) + ".renamed")
    assert_erofs(os.rename, p, view.path("misc") / "moved")
    assert p.is_file()


@pytest.mark.parametrize("target", TARGETS)
def test_setattr_and_setxattr_are_erofs(view, frozen_source, target):
    p = view.path(targets(frozen_source)[target])
    assert_erofs(os.chmod, p, 0o600)
    assert_erofs(os.utime, p, (0, 0))
    assert_erofs(os.setxattr, p, "user.zarrfs_test", b"1")


def a_missing_chunk(tree, path) -> str:
    """The key of an inner chunk inside the grid that is not stored (fill value)."""
    layout = si.load_layout(tree.root / path)
    present = si.inner_chunks(layout)
    coords = next(c for c in itertools.product(*map(range, layout.inner_grid)) if c not in present)
    return f"{path}/{si.chunk_key(coords, layout.cke)}"


@pytest.mark.parametrize("name", ["zp/new_file", "README2.txt", "missing_chunk",
                                  "missing_dot_chunk", f"{ARRAY}/zarr.json.tmp"])
def test_create_is_erofs(view, frozen_source, name):
    """Creating a file fails with EROFS, also where a missing inner chunk would go."""
    if name == "missing_chunk":
        name = a_missing_chunk(frozen_source, ARRAY)
    elif name == "missing_dot_chunk":
        name = a_missing_chunk(frozen_source, DOT_ARRAY)
    p = view.path(name)
    assert not p.exists()
    with pytest.raises(OSError) as info:
        os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    assert info.value.errno == errno.EROFS
    assert not p.exists()


def test_directory_mutations_are_erofs(view, frozen_source):
    """mkdir, rmdir, symlink and hard link fail with EROFS."""
    assert_erofs(os.mkdir, view.path("newdir"))
    assert_erofs(os.mkdir, view.path(f"{ARRAY}/c/99"))
    assert_erofs(os.rmdir, view.path("misc"))
    assert_erofs(os.rmdir, view.path(f"{ARRAY}/c"))
    assert_erofs(os.symlink, "README.txt", view.path("link"))
    assert_erofs(os.link, view.path("README.txt"), view.path("hardlink"))
    assert not view.path("newdir").exists()
    assert view.alive()
