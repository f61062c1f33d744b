"""The unsharded view of a remote source (s3://, az://, gs://, http://), against local servers
(scripts/servers.sh): the default fixture hierarchy is seeded once per backend, mounted by URL
with the backend's standard environment, and judged like the local view:
  - zarr-python and tensorstore read every array as written;
  - chunk files of a few arrays are exactly the independent parser's (names, sizes, bytes),
    and zarr.json is rewritten in chunk_grid and codecs only;
  - `cp -r` of one array out of the view reopens identically with both clients;
  - an http:// mount, and one that does not sign its requests, refuse every change with
    EROFS."""
import errno
import json
import os
import subprocess

import numpy as np
import pytest

import seed_remote as SR
import shardindex as si
from conftest import manifest_entries
from helpers import READERS, assert_same_array, load_json, walk_files
from remote import BACKENDS, remote, remote_view, stats  # noqa: F401 - fixtures

PARSED = ["zp/i16_2d_nested", "zp/i16_2d_start_nocrc_blosc_dot",
          "zp/f64_4d_start_crc_bytes_v2slash", "ts/u8_2d_end_crc_blosc", "ts/f32_0d_sharded",
          "ts/u8_2d_big_chunks", "plain/sub/naïve array"]
COPIED = ["zp/i16_2d_nested", "ts/u8_2d_end_crc_blosc"]


@pytest.mark.parametrize("path", manifest_entries())
@pytest.mark.parametrize("client", sorted(READERS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_client_reads_remote_view_as_written(remote_view, tree, backend, client, path):
    view = remote_view(backend, "--read-only")
    got = READERS[client](view.path(path))
    assert_same_array(got, tree.expected(tree.array(path)), f"{client} on {backend} view {path}")
    assert view.alive()


@pytest.mark.parametrize("path", PARSED)
@pytest.mark.parametrize("backend", BACKENDS)
def test_remote_chunk_files_match_parser(remote_view, tree, backend, path):
    """Listing: zarr.json plus exactly the non-empty inner chunks; each chunk file (looked up by
    key) has the index entry's size and the shard slice's bytes; zarr.json rewritten."""
    view = remote_view(backend, "--read-only")
    expected = si.expected_chunk_files(si.load_layout(tree.root / path))
    listed = set(walk_files(view.path(path)))
    assert listed - set(expected) - {"zarr.json"} == set(), f"unexpected files in {path}"
    assert (set(expected) | {"zarr.json"}) - listed == set(), f"missing files in {path}"
    for key, data in sorted(expected.items()):
        p = view.path(path) / key
        assert os.stat(p).st_size == len(data), f"st_size of {path}/{key}"
        assert p.read_bytes() == data, f"bytes of {path}/{key}"
    shown = load_json(view.path(path) / "zarr.json")
    assert shown == si.view_metadata(load_json(tree.root / path / "zarr.json"))


@pytest.mark.parametrize("path", COPIED)
@pytest.mark.parametrize("backend", BACKENDS)
def test_cp_r_array_from_remote_view(remote_view, tree, backend, path, tmp_path):
    """`cp -r` of one array gives an unsharded copy: both clients read it as written, and its
    chunk files are the parser's."""
    view = remote_view(backend, "--read-only")
    dest = tmp_path / "copy"
    res = subprocess.run(["cp", "-r", str(view.path(path)), str(dest)], capture_output=True,
                         text=True, timeout=240)
    assert res.returncode == 0, f"cp -r failed: {res.stderr}"
    expected = tree.expected(tree.array(path))
    for client, read in sorted(READERS.items()):
        assert_same_array(read(dest), expected, f"{client} on cp -r copy of {backend} {path}")
    meta = load_json(dest / "zarr.json")
    assert "sharding_indexed" not in str(meta["codecs"])
    copied = {k: p.read_bytes() for k, p in walk_files(dest).items() if k != "zarr.json"}
    assert copied == si.expected_chunk_files(si.load_layout(tree.root / path))


def _errno_of(fn) -> int | None:
    try:
        r = fn()
        if isinstance(r, int):
            os.close(r)
    except OSError as e:
        return e.errno
    return None


def test_http_mount_refuses_writes_with_erofs(remote_view, tree):
    """An http:// source is read-only even without --read-only: every mutation is EROFS,
    and zarr-python writing through the view fails with EROFS; reads still work."""
    view = remote_view("http")
    assert "HTTP sources are read-only: mounting" in view.log_text()
    _refuses_every_change(view, tree)


def test_an_unsigned_mount_is_read_only(mounter, remote, tree, monkeypatch):
    """--no-sign-request (public data, read anonymously): nothing can be written without a
    signature, so the mount is read-only without --read-only and says so. Every mutation is
    EROFS at once (not the store's refusal at close), and files are read without opening them,
    as on any read-only mount. The fixture tree is copied into a bucket readable by anyone."""
    remote.ensure("s3")
    for k, v in remote.env("s3").items():
        monkeypatch.setenv(k, v)
    s3, bucket, prefix = SR.s3_client(), "zarrfs-public", f"{remote.run}/public"
    if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=bucket)
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject", "s3:ListBucket"],
         "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]}]}))
    for f in sorted(p for p in tree.root.rglob("*") if p.is_file()):
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{f.relative_to(tree.root).as_posix()}", Body=f.read_bytes())
    view = mounter(f"s3://{bucket}/{prefix}", "--no-sign-request")
    assert "requests are not signed (--no-sign-request), so nothing can be written: mounting" \
        in view.log_text()
    arr = "zp/i16_2d_nested"
    assert_same_array(READERS["zarr-python"](view.path(arr)), tree.expected(tree.array(arr)), "unsigned")
    assert stats(view)["fuse_opens"] == 0, "files are read without opening them"
    _refuses_every_change(view, tree)


def _refuses_every_change(view, tree):
    """Every mutation through `view` is EROFS, zarr-python writing through it too, and its
    reads are unchanged after."""
    arr = "zp/i16_2d_nested"
    a = view.path(arr)
    chunk = sorted(si.expected_chunk_files(si.load_layout(tree.root / arr)))[0]
    ops = {
        "create chunk": lambda: os.open(a / "c/4/4", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644),
        "open chunk for writing": lambda: os.open(a / chunk, os.O_WRONLY),
        "truncate chunk": lambda: os.truncate(a / chunk, 0),
        "unlink chunk": lambda: os.unlink(a / chunk),
        "rename chunk": lambda: os.rename(a / chunk, a / "c/4/5"),
        "rewrite zarr.json": lambda: os.open(a / "zarr.json", os.O_WRONLY | os.O_TRUNC),
        "mkdir": lambda: os.mkdir(view.path("newdir")),
        "new file at root": lambda: os.open(view.path("new.txt"), os.O_WRONLY | os.O_CREAT, 0o644),
        "unlink README": lambda: os.unlink(view.path("README.txt")),
        "rmdir": lambda: os.rmdir(view.path("misc")),
    }
    got = {name: _errno_of(fn) for name, fn in ops.items()}
    assert got == {name: errno.EROFS for name in ops}, got
    import zarr
    from zarr.storage import LocalStore

    z = zarr.open_array(store=LocalStore(str(a)), mode="r+")
    with pytest.raises(OSError) as info:
        z[0:4, 0:4] = np.ones((4, 4), z.dtype)
    assert info.value.errno == errno.EROFS, info.value
    assert_same_array(READERS["zarr-python"](a), tree.expected(tree.array(arr)), "after refusals")
    assert view.alive()


def test_http_stock_static_server(mounter, remote, tree, monkeypatch):
    """The same tree from a stock static web server (nginx with autoindex: a directory without
    a trailing slash answers 301, then an HTML index): the view lists and reads as from the
    object-store-like server."""
    prefix = remote.view_prefix("http")
    view = mounter(SR.http_static_url(prefix), "--read-only")
    path = "zp/i16_2d_nested"
    assert {"zp", "ts", "plain", "zarr.json"} <= set(os.listdir(view.path()))
    assert_same_array(READERS["zarr-python"](view.path(path)), tree.expected(tree.array(path)),
                      "zarr-python on the static-server view")
    expected = si.expected_chunk_files(si.load_layout(tree.root / path))
    got = {k: p.read_bytes() for k, p in walk_files(view.path(path)).items() if k != "zarr.json"}
    assert got == expected
