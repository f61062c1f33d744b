"""HTTP sources served by a stock web server without WebDAV (nginx without the dav module
listening on its own ports, scripts/servers.sh): PROPFIND is refused with 405, so zarrfs lists
directories from the server's HTML index pages (autoindex). The view must be the WebDAV
server's view exactly, read identically by the clients, and `cp -r` of an array out of it
must reopen identically. A URL with nothing Zarr at it fails at mount time, naming the URL."""
import errno
import os
import subprocess

import pytest

import seed_remote as SR
import shardindex as si
from conftest import manifest_entries
from helpers import READERS, assert_same_array, load_json, mount_stats, walk_files
from remote import remote  # noqa: F401 - fixture

COPIED = ["zp/i16_2d_nested", "ts/u8_2d_end_crc_blosc"]


@pytest.fixture
def plain_view(mounter, remote):  # noqa: F811
    """plain_view(index=True) -> a --read-only mount of the fixture tree from the server
    without WebDAV (with or without index pages)."""

    def mount(index: bool = True):
        remote.ensure("http")
        prefix = remote.view_prefix("http")
        return mounter(SR.http_plain_url(prefix, index=index), "--read-only")

    return mount


def listing(root) -> dict[str, int]:
    return {rel: p.stat().st_size for rel, p in walk_files(root).items()}


def test_listing_equals_the_webdav_servers(plain_view, mounter, remote):  # noqa: F811
    view = plain_view()
    webdav = mounter(SR.url("http", remote.view_prefix("http")), "--read-only")
    got, want = listing(view.path()), listing(webdav.path())
    assert len(want) > 100
    assert got == want, (f"missing {sorted(set(want) - set(got))[:5]}, "
                         f"extra {sorted(set(got) - set(want))[:5]}")
    for rel in sorted(want)[::17]:
        assert (view.path() / rel).read_bytes() == (webdav.path() / rel).read_bytes(), rel


@pytest.mark.parametrize("path", manifest_entries())
@pytest.mark.parametrize("client", sorted(READERS))
def test_client_reads_plain_http_view_as_written(plain_view, tree, client, path):
    view = plain_view()
    got = READERS[client](view.path(path))
    assert_same_array(got, tree.expected(tree.array(path)), f"{client} on plain-HTTP view {path}")
    assert view.alive()


@pytest.mark.parametrize("path", COPIED)
def test_cp_r_array_from_plain_http_view(plain_view, tree, path, tmp_path):
    view = plain_view()
    dest = tmp_path / "copy"
    res = subprocess.run(["cp", "-r", str(view.path(path)), str(dest)], capture_output=True,
                         text=True, timeout=240)
    assert res.returncode == 0, f"cp -r failed: {res.stderr}"
    for client, read in sorted(READERS.items()):
        assert_same_array(read(dest), tree.expected(tree.array(path)), f"{client} on the copy")
    assert "sharding_indexed" not in str(load_json(dest / "zarr.json")["codecs"])
    copied = {k: p.read_bytes() for k, p in walk_files(dest).items() if k != "zarr.json"}
    assert copied == si.expected_chunk_files(si.load_layout(tree.root / path))


def test_index_pages_are_read_once_per_directory_and_kept(plain_view):
    """A walk reads each stored directory's page once, with one request (nginx shows exact
    sizes, so no HEAD per file; PROPFIND is not tried again). A second walk within the metadata
    TTL sends no request at all."""
    view = plain_view()
    path = view.path("ts")
    before = mount_stats(view.path())
    dirs = 1 + sum(1 for p in path.rglob("*") if p.is_dir())
    first = mount_stats(view.path())
    d = {k: first[k] - before[k] for k in ("list_dir", "get", "head", "http_requests")}
    assert 0 < d["list_dir"] <= dirs, (dirs, d)
    # Every request on the wire is one of the store's: a listing is one page, nothing more.
    assert d["http_requests"] == d["list_dir"] + d["get"] + d["head"], d
    sum(1 for _ in path.rglob("*"))
    second = mount_stats(view.path())
    assert second["http_requests"] == first["http_requests"], "a kept listing was asked again"


def test_a_url_without_zarr_fails_at_mount_naming_it(zarrfs_bin, remote, tmp_path):  # noqa: F811
    remote.ensure("http")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    for index in (True, False):
        url = SR.http_plain_url(remote.view_prefix("http") + "/no/such/dataset", index=index)
        res = subprocess.run([str(zarrfs_bin), "mount", url, str(mnt), "--read-only"],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode != 0
        assert url in res.stderr and "zarr.json: not found (404)" in res.stderr, res.stderr


@pytest.mark.parametrize("path", manifest_entries())
@pytest.mark.parametrize("client", sorted(READERS))
def test_without_listings_arrays_read_by_name(plain_view, tree, client, path):
    """A server with neither WebDAV nor index pages: nodes are found by their metadata, chunks
    through their shards' indexes, and every array reads as written."""
    view = plain_view(index=False)
    got = READERS[client](view.path(path))
    assert_same_array(got, tree.expected(tree.array(path)), f"{client} without listings {path}")
    assert view.alive()


@pytest.mark.parametrize("path", COPIED)
def test_without_listings_cp_r_of_a_sharded_array_is_complete(plain_view, tree, path, tmp_path):
    """The chunk directories of a sharded array are listed by reading the indexes of the grid's
    shards, so `cp -r` gives the complete unsharded copy, at one request per shard."""
    view = plain_view(index=False)
    dest = tmp_path / "copy"
    before = mount_stats(view.path())
    res = subprocess.run(["cp", "-r", str(view.path(path)), str(dest)], capture_output=True,
                         text=True, timeout=240)
    assert res.returncode == 0, f"cp -r failed: {res.stderr}"
    copied = {k: p.read_bytes() for k, p in walk_files(dest).items() if k != "zarr.json"}
    assert copied == si.expected_chunk_files(si.load_layout(tree.root / path))
    for client, read in sorted(READERS.items()):
        assert_same_array(read(dest), tree.expected(tree.array(path)), f"{client} on the copy")
    grid = si.load_layout(tree.root / path)
    shards = len(si.stored_shards(grid))
    d = {k: mount_stats(view.path())[k] - before[k] for k in ("get", "http_requests")}
    print(f"{path}: {shards} stored shards, {d}")
    assert d["http_requests"] <= 4 * (shards + 8), d


def test_without_listings_a_listing_shows_what_was_found(plain_view):
    """`ls` shows what has been found so far, and the log says why listings are partial."""
    view = plain_view(index=False)
    assert os.listdir(view.path()) == ["zarr.json"]
    assert (view.path("zp/i16_2d_nested") / "zarr.json").is_file()
    assert "zp" in os.listdir(view.path())
    log = view.log_text()
    assert "no WebDAV PROPFIND" in log and "no HTML directory index page" in log, log[-2000:]
    assert "a listing shows only what has been found" in log


def test_without_listings_a_missing_name_is_asked_for_once(plain_view):
    """Negative results are kept for the metadata TTL: looking up a name that does not exist
    again sends nothing. The shards read to list a chunk directory are counted."""
    view = plain_view(index=False)
    missing = view.path("zp/no_such_array")
    assert not missing.exists()
    assert not (view.path("zp") / ".zarray").exists()
    before = mount_stats(view.path())
    for _ in range(3):
        assert not missing.exists()
        assert not (view.path("zp") / ".zarray").exists()
    after = mount_stats(view.path())
    assert after["http_requests"] == before["http_requests"], (before, after)
    # no_such_array was probed as a directory; .zarray, a document name, is never one.
    assert after["dir_probes"] == before["dir_probes"] == 1, (before, after)
    os.listdir(view.path("zp/i16_2d_nested/c"))
    assert mount_stats(view.path())["shard_probes"] > after["shard_probes"]


def test_without_listings_max_probe_shards_bounds_a_listing(mounter, remote, tree):  # noqa: F811
    """Beyond --max-probe-shards, a chunk directory lists nothing (with a warning naming the
    option) instead of reading every shard index; its chunks still open by name."""
    remote.ensure("http")
    url = SR.http_plain_url(remote.view_prefix("http"), index=False)
    view = mounter(url, "--read-only", "--max-probe-shards", "1")
    path = "zp/i16_2d_nested"
    expected = si.expected_chunk_files(si.load_layout(tree.root / path))
    key, data = sorted(expected.items())[0]
    assert os.listdir(view.path(f"{path}/c")) == []
    assert "--max-probe-shards 1" in view.log_text()
    assert (view.path(path) / key).read_bytes() == data


UNSHARDED = ["zp/unsharded_2d", "ts/unsharded_3d", "zp/unsharded_0d", "legacy/v2/dots",
             "legacy/v2/slashes"]


def stored_files(root) -> dict[str, bytes]:
    return {k: p.read_bytes() for k, p in walk_files(root).items()}


@pytest.mark.parametrize("path", UNSHARDED)
def test_without_listings_cp_r_of_an_unsharded_array_is_complete(plain_view, tree, path, tmp_path):
    """Arrays without sharding (v3, and v2 with `.` and `/` keys): the chunk keys of the grid
    are asked for with a HEAD each (counted as key_probes), so `cp -r` copies every stored file
    (v2's .zattrs too), byte for byte, and a second copy within the TTL asks for nothing."""
    view = plain_view(index=False)
    source = stored_files(tree.root / path)
    before = mount_stats(view.path())
    dest = tmp_path / "copy"
    res = subprocess.run(["cp", "-r", str(view.path(path)), str(dest)], capture_output=True,
                         text=True, timeout=240)
    assert res.returncode == 0, f"cp -r failed: {res.stderr}"
    copied = stored_files(dest)
    assert copied.keys() == source.keys(), (f"missing {sorted(source.keys() - copied.keys())[:5]}, "
                                            f"extra {sorted(copied.keys() - source.keys())[:5]}")
    assert copied == source
    after = mount_stats(view.path())
    d = {k: after[k] - before[k] for k in ("http_requests", "key_probes", "get", "head")}
    print(f"{path}: {len(source)} files, {d}")
    assert d["key_probes"] >= len([k for k in source if not k.startswith((".z", "zarr.json"))]), d
    # Each key of the grid: one HEAD; each chunk found: one read (its lookup is answered from
    # the search); metadata, and the directories on the way from the root: a few requests each.
    assert d["http_requests"] <= d["key_probes"] + len(source) + 4 * path.count("/") + 10, d
    again = tmp_path / "again"
    subprocess.run(["cp", "-r", str(view.path(path)), str(again)], check=True, timeout=240)
    assert stored_files(again) == source
    assert mount_stats(view.path())["key_probes"] == after["key_probes"], "searched again"


def test_without_listings_the_raw_view_lists_shards(mounter, remote, tree, tmp_path):  # noqa: F811
    """In the raw view a sharded array's shards are its chunk keys: they are searched for like
    any array's, and `cp -r` copies the stored array exactly."""
    remote.ensure("http")
    url = SR.http_plain_url(remote.view_prefix("http"), index=False)
    view = mounter(url, "--read-only", "--view", "raw")
    path = "zp/i16_2d_nested"
    dest = tmp_path / "copy"
    res = subprocess.run(["cp", "-r", str(view.path(path)), str(dest)], capture_output=True,
                         text=True, timeout=240)
    assert res.returncode == 0, f"cp -r failed: {res.stderr}"
    assert stored_files(dest) == stored_files(tree.root / path)
    assert mount_stats(view.path())["key_probes"] > 0


@pytest.mark.parametrize("path", ["ts/unsharded_3d", "zp/f64_4d_start_crc_bytes_v2slash"])
def test_without_listings_beyond_max_probe_shards_a_walk_goes_down(mounter, remote, tree, path,
                                                                   tmp_path):  # noqa: F811
    """A chunk directory above the last level with more keys (or shards) below it than
    --max-probe-shards shows every coordinate of the grid's next level, so a walk goes on down
    to directories small enough to search, and `cp -r` is still complete."""
    remote.ensure("http")
    url = SR.http_plain_url(remote.view_prefix("http"), index=False)
    view = mounter(url, "--read-only", "--max-probe-shards", "4")
    dest = tmp_path / "copy"
    res = subprocess.run(["cp", "-r", str(view.path(path)), str(dest)], capture_output=True,
                         text=True, timeout=240)
    assert res.returncode == 0, f"cp -r failed: {res.stderr}"
    copied = {k: v for k, v in stored_files(dest).items() if k != "zarr.json"}
    layout = si.load_layout(tree.root / path)
    if layout.sharded:
        want = si.expected_chunk_files(layout)
    else:
        want = {k: v for k, v in stored_files(tree.root / path).items() if k != "zarr.json"}
    assert copied == want
    for client, read in sorted(READERS.items()):
        assert_same_array(read(dest), tree.expected(tree.array(path)), f"{client} on the copy")
    assert "--max-probe-shards 4" not in view.log_text(), "no directory was left unsearched"


@pytest.fixture
def page_proxy(remote):  # noqa: F811
    """A FaultProxy in front of the nginx listener with index pages and no WebDAV, closed after
    the test's mounts."""
    from test_remote_retries import FaultProxy
    remote.ensure("http")
    proxy = FaultProxy(SR.http_plain_url("", index=True).rsplit("/", 1)[0]).start()
    yield proxy
    proxy.close()


def test_index_pages_are_retried_like_every_request(page_proxy, mounter, remote):  # noqa: F811
    """Every directory's index page fails once (a dropped connection, a page broken off half
    way, then 503s): each is asked for again after a backoff, the listing is the WebDAV
    server's exactly, and the counters say so: retries == failures == faults injected."""
    from test_remote_retries import TransientFaults
    page_proxy.arm(TransientFaults(every=1, only=lambda req: req.target.endswith("/")))
    prefix = remote.view_prefix("http")
    view = mounter(f"{page_proxy.url}/{SR.join_key(SR.BUCKET, prefix)}", "--read-only")
    webdav = mounter(SR.url("http", prefix), "--read-only")
    before = mount_stats(view.path())
    got, want = listing(view.path("ts")), listing(webdav.path("ts"))
    assert len(want) > 20 and got == want
    page_proxy.settle()
    after = mount_stats(view.path())
    faults = [s for s in page_proxy.seen if s.fault]
    kinds = {s.fault for s in faults}
    assert {"drop", "truncate", "503"} <= kinds, kinds
    d = {k: after[k] - before[k] for k in ("retries", "http_failures")}
    assert d["retries"] == d["http_failures"] > 5, d
    # The mount's own first pages (before `before`) failed and were retried too.
    assert after["retries"] == after["http_failures"] == len(faults), (after, len(faults))


def test_a_page_that_keeps_failing_fails_the_listing_with_eio(page_proxy, mounter, remote):  # noqa: F811
    """A directory whose page always answers 503: its listing fails with EIO after the retries
    (1 + 4 requests, within seconds), naming the URL; other directories list."""
    from test_remote_retries import FailObject
    prefix = remote.view_prefix("http")
    view = mounter(f"{page_proxy.url}/{SR.join_key(SR.BUCKET, prefix)}", "--read-only")
    assert "ts" in os.listdir(view.path())
    # Below a Zarr v2 group: not listed ahead by the mount's metadata warm-up (it lists v3
    # groups, which are therefore listed already).
    broken = f"/{SR.join_key(SR.BUCKET, prefix)}/legacy/v2/"
    page_proxy.arm(FailObject(broken))
    with pytest.raises(OSError) as err:
        os.listdir(view.path("legacy/v2"))
    assert err.value.errno == errno.EIO
    assert sum(1 for s in page_proxy.seen if s.key == broken) == 5
    assert "503" in view.log_text() and "after 5 tries" in view.log_text()
    assert os.listdir(view.path("ts"))
    page_proxy.disarm()
    assert os.listdir(view.path("legacy/v2"))


@pytest.mark.parametrize("path", COPIED)
def test_https_with_a_trusted_authority_reads_like_the_webdav_server(mounter, remote, tree, path,
                                                                     monkeypatch, tmp_path):  # noqa: F811
    """HTTPS from a stock server (no WebDAV, index pages) whose certificate a private authority
    signed, trusted with SSL_CERT_FILE (a relative path too: the daemon resolves it before it
    leaves the working directory): the listing is the WebDAV server's, every client reads the
    array as written, and `cp -r` of it reopens identically."""
    remote.ensure("http")
    prefix = remote.view_prefix("http")
    ca = SR.https_ca()
    monkeypatch.chdir(ca.parent)
    monkeypatch.setenv("SSL_CERT_FILE", ca.name)
    view = mounter(SR.https_url(prefix), "--read-only")
    webdav = mounter(SR.url("http", prefix), "--read-only")
    assert listing(view.path(path)) == listing(webdav.path(path))
    for client, read in sorted(READERS.items()):
        assert_same_array(read(view.path(path)), tree.expected(tree.array(path)), f"{client} over HTTPS")
    dest = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(view.path(path)), str(dest)], check=True, timeout=240)
    assert_same_array(READERS["zarr-python"](dest), tree.expected(tree.array(path)), "the copy")


def test_https_with_an_untrusted_certificate_fails_at_mount_saying_how(zarrfs_bin, mounter, remote,
                                                                        monkeypatch, tmp_path):  # noqa: F811
    """An untrusted certificate: `mount` fails with the reason and both ways out, once (not
    once per document it tried); `-o allow_invalid_certificates=true` mounts it."""
    remote.ensure("http")
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    url = SR.https_url(remote.view_prefix("http"))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    res = subprocess.run([str(zarrfs_bin), "mount", url, str(mnt), "--read-only"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    message = res.stderr
    assert url in message and "certificate is not trusted" in message, message
    assert "SSL_CERT_FILE" in message and "allow_invalid_certificates=true" in message, message
    assert "UnknownIssuer" in message and message.count("not trusted") == 1, message
    view = mounter(url, "--read-only", "-o", "allow_invalid_certificates=true")
    assert "zarr.json" in os.listdir(view.path())


def test_without_listings_a_consolidated_hierarchy_walks_completely(mounter, remote, tree,
                                                                   tmp_path):  # noqa: F811
    """The fixture hierarchy consolidated with zarr.consolidate_metadata, served with no listing
    at all: a walk from the root finds every file the WebDAV server's mount shows below the
    nodes the consolidated metadata names (chunk files of sharded and unsharded arrays alike),
    with the same sizes and bytes, and every array reads as written. Only what no metadata
    names stays unfound: the v2/v1 tree zarr-python does not consolidate, and non-Zarr files."""
    import warnings

    import zarr
    copy = tmp_path / "consolidated"
    import shutil
    shutil.copytree(tree.root, copy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(copy))
    remote.ensure("http")
    prefix = remote.seed("http", copy, "consolidated")
    view = mounter(SR.http_plain_url(prefix, index=False), "--read-only")
    webdav = mounter(SR.url("http", prefix), "--read-only")
    unnamed = ("legacy/", "misc/", "README.txt", "plain/sub/.hidden")
    want = {k: v for k, v in listing(webdav.path()).items() if not k.startswith(unnamed)}
    got = listing(view.path())
    assert len(want) > 100
    assert got == want, (f"missing {sorted(set(want) - set(got))[:5]}, "
                         f"extra {sorted(set(got) - set(want))[:5]}")
    for rel in sorted(want)[::13]:
        assert (view.path() / rel).read_bytes() == (webdav.path() / rel).read_bytes(), rel
    for path in manifest_entries():
        for client, read in sorted(READERS.items()):
            assert_same_array(read(view.path(path)), tree.expected(tree.array(path)),
                              f"{client} without listings, consolidated, {path}")
    stats = mount_stats(view.path())
    print({k: stats[k] for k in ("http_requests", "key_probes", "shard_probes", "dir_probes")})


@pytest.fixture
def python_http_server(remote):  # noqa: F811
    """`python -m http.server` over the web server's files: no WebDAV (PROPFIND is 501), a
    directory's URL redirects to its index page, and Range is ignored (a range is answered
    with the whole file)."""
    import socket
    import sys
    import time
    remote.ensure("http")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                             "--directory", str(SR.http_root())],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


def test_python_http_server_is_read_like_the_webdav_server(python_http_server, mounter, remote,
                                                           tree, tmp_path):  # noqa: F811
    """The quickest way to share a directory: the listing is the WebDAV server's (directories
    are not mistaken for the index pages their URLs redirect to), every client reads an array
    as written though every range comes back whole, and the log says why reads are slow."""
    prefix = remote.view_prefix("http")
    view = mounter(f"{python_http_server}/{SR.join_key(SR.BUCKET, prefix)}", "--read-only")
    webdav = mounter(SR.url("http", prefix), "--read-only")
    for path in COPIED + ["zp/unsharded_2d"]:
        assert listing(view.path(path)) == listing(webdav.path(path)), path
        for client, read in sorted(READERS.items()):
            assert_same_array(read(view.path(path)), tree.expected(tree.array(path)),
                              f"{client} from python's http.server, {path}")
    # nginx's WebDAV hides dot files; python's index pages show them, as they are stored.
    legacy = "legacy/v2/dots"
    assert stored_files(view.path(legacy)) == stored_files(tree.root / legacy)
    dest = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(view.path(COPIED[0])), str(dest)], check=True, timeout=240)
    assert stored_files(dest) == stored_files(webdav.path(COPIED[0]))
    log = view.log_text()
    assert "ignores Range requests" in log and log.count("ignores Range requests") == 1, log[-2000:]
    assert mount_stats(view.path())["retries"] == 0


@pytest.mark.parametrize("server", ["webdav", "index pages"])
def test_zarr_v2_documents_hidden_by_listings_are_copied(server, mounter, remote, tree, tmp_path):  # noqa: F811
    """nginx leaves dot files out of its WebDAV and index listings, where Zarr v2 keeps its
    metadata: they are asked for, so `ls -a` shows them and `cp -r` of a v2 group copies
    every stored file, which zarr-python then opens as the v2 group it is."""
    import zarr
    remote.ensure("http")
    prefix = remote.view_prefix("http")
    url = SR.url("http", prefix) if server == "webdav" else SR.http_plain_url(prefix)
    view = mounter(url, "--read-only")
    assert {".zarray", ".zattrs", "0.0"} <= set(os.listdir(view.path("legacy/v2/dots")))
    dest = tmp_path / "v2"
    subprocess.run(["cp", "-r", str(view.path("legacy/v2")), str(dest)], check=True, timeout=120)
    assert stored_files(dest) == stored_files(tree.root / "legacy/v2")
    group = zarr.open_group(dest, mode="r", zarr_format=2)
    assert group.attrs["kind"] == "v2"
    assert (group["dots"][...] == zarr.open_array(tree.root / "legacy/v2/dots", mode="r")[...]).all()
