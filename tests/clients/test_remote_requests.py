"""Requests a remote view sends, from the daemon's counters (xattr `user.zarrfs.stats` of the
mount root: get, get_bytes, head, set, set_bytes, erase, list, list_dir). Each measurement is
printed and appended to .cache/remote-stats.jsonl.
  - a cold read of one chunk file (metadata of its array already read) costs at most 2 GETs:
    the shard index and the chunk;
  - re-reading the same file right away costs no GET;
  - a cold `cp -r` of an array costs at most 1.2 GETs per stored shard (one GET per shard plus
    metadata: needs whole-shard prefetch on sequential copies)."""
import os
import subprocess

import pytest

import shardindex as si
from remote import BACKENDS, delta, record, remote, remote_view, stats  # noqa: F401
from helpers import walk_files

SINGLE = ["ts/u8_2d_end_crc_blosc", "zp/i16_2d_start_nocrc_blosc_dot"]
COPIED = ["ts/u8_2d_many_files_dot", "ts/u8_2d_end_crc_blosc"]


def first_chunk(tree, path) -> tuple[str, bytes]:
    return sorted(si.expected_chunk_files(si.load_layout(tree.root / path)).items())[0]


@pytest.mark.parametrize("path", SINGLE)
@pytest.mark.parametrize("backend", BACKENDS)
def test_cold_chunk_read_then_warm_reread(remote_view, tree, backend, path):
    view = remote_view(backend, "--read-only")
    key, data = first_chunk(tree, path)
    s_mount = stats(view)
    os.stat(view.path(path))
    assert (view.path(path) / "zarr.json").read_bytes()  # metadata of the array
    s_meta = stats(view)
    with open(view.path(path) / key, "rb") as f:  # lookup of the chunk path, open, read
        assert f.read() == data
    s_cold = stats(view)
    with open(view.path(path) / key, "rb") as f:
        assert f.read() == data
    s_warm = stats(view)
    meta, cold, warm = delta(s_mount, s_meta), delta(s_meta, s_cold), delta(s_cold, s_warm)
    record("chunk read", backend=backend, array=path, key=key, chunk_bytes=len(data),
           mount_to_metadata=meta, cold_chunk=cold, warm_reread=warm)
    assert cold["get"] <= 2, f"cold read of {path}/{key} cost {cold['get']} GETs: {cold}"
    assert warm["get"] == 0, f"warm re-read of {path}/{key} cost {warm['get']} GETs: {warm}"


@pytest.mark.parametrize("path", COPIED)
@pytest.mark.parametrize("backend", BACKENDS)
def test_cold_cp_r_gets_per_shard(remote_view, tree, backend, path, tmp_path):
    """GETs of a cold `cp -r` of the array directory per stored shard, once the array's own
    metadata has been read (os.stat of the directory and its zarr.json, counted separately:
    they are what any client reads first)."""
    view = remote_view(backend, "--read-only")
    layout = si.load_layout(tree.root / path)
    shards = si.stored_shards(layout)
    shard_bytes = sum(p.stat().st_size for p in shards.values())
    chunks = si.expected_chunk_files(layout)
    s_mount = stats(view)
    os.stat(view.path(path))
    assert (view.path(path) / "zarr.json").read_bytes()
    s_meta = stats(view)
    res = subprocess.run(["cp", "-r", str(view.path(path)), str(tmp_path / "copy")],
                         capture_output=True, text=True, timeout=280)
    assert res.returncode == 0, f"cp -r failed: {res.stderr}"
    s_copy = stats(view)
    meta, d, total = delta(s_mount, s_meta), delta(s_meta, s_copy), delta(s_mount, s_copy)
    per_shard = d["get"] / len(shards)
    record("cold cp -r", backend=backend, array=path, shards=len(shards),
           chunk_files=len(chunks), shard_bytes=shard_bytes, metadata=meta, copy=d,
           gets_per_shard=round(per_shard, 3),
           gets_per_shard_with_metadata=round(total["get"] / len(shards), 3),
           get_bytes_per_shard_byte=round(d["get_bytes"] / shard_bytes, 3))
    copied = {k for k in walk_files(tmp_path / "copy") if k != "zarr.json"}
    assert copied == set(chunks), "the copy does not hold exactly the chunk files"
    assert per_shard <= 1.2, (f"cold cp -r of {path} on {backend}: {d['get']} GETs for "
                              f"{len(shards)} shards = {per_shard:.2f} per shard ({d})")


@pytest.mark.parametrize("backend", BACKENDS)
def test_warm_cp_r_sends_nothing(remote_view, tree, backend, tmp_path):
    """A second `cp -r` of an array within the metadata TTL is served from the caches: shard
    bytes, indexes and listings alike. Not one request."""
    path = COPIED[0]
    view = remote_view(backend, "--read-only")
    chunks = si.expected_chunk_files(si.load_layout(tree.root / path))
    for i in range(2):
        before = stats(view)
        res = subprocess.run(["cp", "-r", str(view.path(path)), str(tmp_path / f"copy{i}")],
                             capture_output=True, text=True, timeout=280)
        assert res.returncode == 0, f"cp -r failed: {res.stderr}"
        d = delta(before, stats(view))
        copied = {k: (tmp_path / f"copy{i}" / k).read_bytes()
                  for k in walk_files(tmp_path / f"copy{i}") if k != "zarr.json"}
        assert copied == chunks, "the copy does not hold exactly the chunk files"
    record("warm cp -r", backend=backend, array=path, chunk_files=len(chunks), copy=d)
    sent = {k: d[k] for k in ("get", "head", "list", "list_dir", "http_requests")}
    assert sent == dict.fromkeys(sent, 0), f"warm cp -r of {path} on {backend} sent requests: {d}"


def test_listings_follow_other_writers_after_the_ttl(remote_view, remote, tree, tmp_path):
    """Listings are kept for --metadata-ttl: a shard another client deletes leaves the chunk
    listing once the TTL has passed (and not one listing is sent while it holds)."""
    import shutil
    import time

    import seed_remote as SR
    path = "ts/u8_2d_many_files_dot"
    prefix = remote.seed("s3", tree.root / path, "ttl-listing")
    # A TTL long enough that two listings in a row fall within it on a loaded machine.
    view = remote_view("s3", "--read-only", "--metadata-ttl", "3", prefix=prefix)
    layout = si.load_layout(tree.root / path)
    victim = sorted(si.stored_shards(layout).values())[0]
    after_delete = tmp_path / "array"
    shutil.copytree(tree.root / path, after_delete)
    (after_delete / victim.name).unlink()
    before = {"zarr.json", *si.expected_chunk_files(layout)}
    after = {"zarr.json", *si.expected_chunk_files(si.load_layout(after_delete))}
    assert after < before

    assert set(os.listdir(view.path())) == before
    s0 = stats(view)
    assert set(os.listdir(view.path())) == before
    assert delta(s0, stats(view))["list_dir"] == 0, "a listing within the TTL was sent again"
    SR.s3_client().delete_object(Bucket=SR.BUCKET, Key=SR.join_key(prefix, victim.name))
    time.sleep(3.5)
    assert set(os.listdir(view.path())) == after, "a shard deleted by another writer still listed"


def test_no_prefetch_still_trusts_indexes_on_open(remote_view, tree):
    """--prefetch-size 0 only stops reading ahead: a remote view still trusts a shard index for
    the metadata TTL when a file is opened again (no HEAD per open)."""
    path = SINGLE[0]
    view = remote_view("s3", "--read-only", "--prefetch-size", "0")
    key, data = first_chunk(tree, path)
    assert (view.path(path) / key).read_bytes() == data
    before = stats(view)
    for _ in range(3):
        with open(view.path(path) / key, "rb") as f:
            assert f.read() == data
    d = delta(before, stats(view))
    record("re-open without prefetch", backend="s3", array=path, key=key, reopen=d)
    assert d["head"] == 0, f"re-opening {path}/{key} asked for the shard's version: {d}"
    assert d["get"] <= 1, f"re-opening {path}/{key} read the chunk every time: {d}"
