"""The remote test servers themselves (no zarrfs needed): each starts, holds the seeded default
hierarchy byte for byte (listed and read back through the server's own API), serves the byte
ranges the daemon relies on (bounded and suffix ranges of a shard), and the independent shard
parser reads the copy fetched from the bucket exactly like the local original. HTTP refuses
writes at the server."""
import pytest

import seed_remote as SR
import shardindex as si
from remote import BACKENDS, download_tree, remote  # noqa: F401 - fixture

PARSED = ["zp/i16_2d_nested", "ts/u8_2d_end_crc_blosc", "plain/sub/naïve array",
          "zp/f64_4d_start_crc_bytes_v2slash"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_bucket_holds_the_hierarchy(remote, tree, backend):
    """Every file of the fixture hierarchy is an object of the same bytes under the prefix."""
    prefix = remote.view_prefix(backend)  # also checks the listing against the tree
    for rel, path in sorted(SR.local_files(tree.root).items()):
        assert SR.get_object(backend, SR.join_key(prefix, rel)) == path.read_bytes(), rel


@pytest.mark.parametrize("backend", BACKENDS)
def test_ranges_of_a_shard(remote, tree, backend):
    """A bounded range, a suffix range (the index at the end) and the leading index bytes of a
    shard come back exactly; a missing key is reported as missing."""
    prefix = remote.view_prefix(backend)
    layout = si.load_layout(tree.root / "ts/u8_2d_end_crc_blosc")
    coords, path = sorted(si.stored_shards(layout).items())[0]
    key = SR.join_key(prefix, f"ts/u8_2d_end_crc_blosc/{si.chunk_key(coords, layout.cke)}")
    data = path.read_bytes()
    assert SR.get_object(backend, key, "bytes=100-199") == data[100:200]
    assert SR.get_object(backend, key, "bytes=-1028") == data[-1028:]
    assert SR.get_object(backend, key, f"bytes=0-{len(data) - 1}") == data
    with pytest.raises(KeyError):
        SR.get_object(backend, SR.join_key(prefix, "ts/u8_2d_end_crc_blosc/c/9/9"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_parser_on_bucket_copy_matches_local(remote, tree, backend, tmp_path):
    """The chunk files the view must show, computed from the bucket's objects, equal those
    computed from the local hierarchy (so the view tests may use either)."""
    prefix = remote.view_prefix(backend)
    copy = download_tree(backend, prefix, tmp_path / "copy")
    for path in PARSED:
        want = si.expected_chunk_files(si.load_layout(tree.root / path))
        got = si.expected_chunk_files(si.load_layout(copy / path))
        assert got == want, path
        assert want, f"{path}: no chunk files expected (fixture changed?)"


def test_http_server_refuses_writes(remote):
    """nginx serves the bucket read-only: PUT and DELETE are refused (403/405)."""
    prefix = remote.view_prefix("http")
    url = SR.http_url(SR.join_key(prefix, "README.txt"))
    for method in ("PUT", "DELETE"):
        status, _, _ = SR.http_request(method, url, b"x" if method == "PUT" else None)
        assert status in (403, 405), f"{method} answered {status}"
    assert SR.get_object("http", SR.join_key(prefix, "README.txt")).startswith(b"zarrfs fixtures")
