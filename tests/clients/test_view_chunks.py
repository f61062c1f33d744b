"""Assertion 2: for every sharded array the view's chunk files are exactly the stored non-empty
inner chunks inside the inner chunk grid, at the keys of the array's chunk key encoding, with
exact sizes and bytes (computed by the independent reader shardindex.py); reads past the end
are short; zarr.json is rewritten in chunk_grid and codecs only."""
import errno
import itertools
import os

import pytest

import shardindex as si
from conftest import manifest_entries
from helpers import load_json, pread_in_child, walk_files

SHARDED = manifest_entries("sharded")


def expected_files(tree, path) -> dict[str, bytes]:
    return si.expected_chunk_files(si.load_layout(tree.root / path))


@pytest.mark.parametrize("path", SHARDED)
def test_chunk_tree_lists_exactly_the_inner_chunks(view, tree, path):
    """The files under the array's view directory are zarr.json plus one file per non-empty
    inner chunk, named by the chunk key encoding; nothing else."""
    expected = set(expected_files(tree, path)) | {"zarr.json"}
    listed = set(walk_files(view.path(path)))
    assert listed - expected == set(), f"unexpected files in view of {path}"
    assert expected - listed == set(), f"missing chunk files in view of {path}"


@pytest.mark.parametrize("path", SHARDED)
def test_chunk_files_have_exact_sizes_and_bytes(view, tree, path):
    """stat size == index nbytes, and the content is the slice of the shard, for every chunk
    file (looked up by key, independent of the listing)."""
    for key, data in expected_files(tree, path).items():
        p = view.path(path) / key
        assert os.stat(p).st_size == len(data), f"st_size of {path}/{key}"
        assert p.read_bytes() == data, f"bytes of {path}/{key}"


@pytest.mark.parametrize("path", SHARDED)
def test_absent_inner_chunks_are_enoent(view, tree, path):
    """Keys of empty index entries, of shards that are not stored and of chunks outside the
    grid do not exist (ENOENT), so clients read the fill value."""
    layout = si.load_layout(tree.root / path)
    present = si.inner_chunks(layout)
    probes = [c for c in itertools.product(*map(range, layout.inner_grid))
              if c not in present][:20]
    probes.append(tuple(g for g in layout.inner_grid))  # one past the grid in every dimension
    if layout.shape == ():
        probes = [] if present else [()]
    for coords in probes:
        key = si.chunk_key(coords, layout.cke)
        with pytest.raises(FileNotFoundError):
            os.stat(view.path(path) / key)


@pytest.mark.parametrize("path", SHARDED)
def test_reads_past_eof_are_short(view, tree, path):
    """pread at or beyond the end returns b"", a read straddling the end returns the tail,
    a read in the middle returns exactly that range."""
    files = sorted(expected_files(tree, path).items())[:4]
    for key, data in files:
        fd = os.open(view.path(path) / key, os.O_RDONLY)
        try:
            n = len(data)
            assert os.pread(fd, 100, n) == b"", f"read at EOF of {key}"
            assert os.pread(fd, 100, n + 4096) == b"", f"read past EOF of {key}"
            assert os.pread(fd, 100, n - 1) == data[-1:], f"read straddling EOF of {key}"
            assert os.pread(fd, n + 1000, 0) == data, f"oversized read of {key}"
            assert os.pread(fd, 7, n // 3) == data[n // 3:n // 3 + 7], f"middle read of {key}"
        finally:
            os.close(fd)


@pytest.mark.parametrize("path", SHARDED)
def test_read_at_huge_offset_returns_promptly(view, tree, path):
    """os.pread at offset 2**62 returns b"" or fails with EINVAL/EFBIG/EOVERFLOW within 30 s;
    afterwards the daemon still serves the file."""
    files = sorted(expected_files(tree, path).items())
    target = view.path(path) / (files[0][0] if files else "zarr.json")
    out = pread_in_child(target, 4096, 2**62)
    assert not out.get("timeout"), "pread at 2**62 did not return within 30 s"
    if "errno" in out:
        assert out["errno"] in (errno.EINVAL, errno.EFBIG, errno.EOVERFLOW), out
    else:
        assert out["ok"] == b""
    assert view.alive()
    if files:
        assert target.read_bytes() == files[0][1]


@pytest.mark.parametrize("path", SHARDED)
def test_zarr_json_rewritten_in_grid_and_codecs_only(view, tree, path):
    """The view's zarr.json equals the stored one with chunk_grid.chunk_shape := innermost
    chunk shape and codecs := innermost codecs; its stat size is its length."""
    stored = load_json(tree.root / path / "zarr.json")
    p = view.path(path) / "zarr.json"
    raw = p.read_bytes()
    assert os.stat(p).st_size == len(raw)
    shown = load_json(p)
    assert shown == si.view_metadata(stored)


@pytest.mark.parametrize("path", ["ts/u8_2d_big_chunks", "zp/f64_4d_start_crc_bytes_v2slash"])
def test_chunk_files_read_through_mmap(view, tree, path):
    """Memory-mapping a chunk file gives its bytes (tools that mmap their inputs work)."""
    import mmap

    for key, data in sorted(expected_files(tree, path).items())[:3]:
        with open(view.path(path) / key, "rb") as f:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                assert mm[:] == data, key


def test_big_chunk_reads_in_odd_pieces(view, tree):
    """A 256 KiB chunk file read in 4099-byte pieces and in one 1 MiB read is exact."""
    path = "ts/u8_2d_big_chunks"
    for key, data in expected_files(tree, path).items():
        with open(view.path(path) / key, "rb", buffering=0) as f:
            pieces = b"".join(iter(lambda: f.read(4099), b""))
        assert pieces == data, key
        fd = os.open(view.path(path) / key, os.O_RDONLY)
        try:
            assert os.pread(fd, 1 << 20, 0) == data, key
        finally:
            os.close(fd)
