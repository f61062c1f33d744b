"""Directory listings kept by the kernel (FOPEN_CACHE_DIR), with --metadata-ttl of 10 s or more:
a walk of a tree walked before sends no READDIR, only an OPENDIR per directory, while the
listing is unchanged and was handed over less than the TTL ago. Changes through the mount show
at once; another mount's changes once the TTL has passed. A local mount with a TTL under 10 s
lists through the daemon every time; a local mount given no TTL is watched (its TTL never
expires, changes drop what they touch: test_source_watch.py) and keeps listings too."""
import os
import subprocess
import time

import shardindex as si
from writing import build, delta, mount_writable, payload_spec, stats


def find(path) -> list[str]:
    out = subprocess.run(["find", str(path)], capture_output=True, text=True, check=True).stdout
    return sorted(out.splitlines())


def names(path) -> set[str]:
    return set(os.listdir(path))


def sharded_entry(tree):
    return next(e for e in tree.arrays("sharded") if e["path"].startswith("zp/"))


def test_a_warm_walk_with_an_indefinite_ttl_sends_no_readdir(mounter, tree):
    entry = sharded_entry(tree)
    m = mounter(tree.root, "--read-only", "--metadata-ttl", "indefinite")
    first = find(m.path(entry["path"]))
    expected = si.expected_chunk_files(si.load_layout(tree.root / entry["path"]))
    shown = {p[len(str(m.path(entry["path"]))) + 1:] for p in first}
    assert set(expected) <= shown, "the walk does not show every chunk file"
    before = stats(m)
    assert find(m.path(entry["path"])) == first
    d = delta(before, stats(m))
    assert d["fuse_readdirs"] == 0, f"a warm walk was listed by the daemon: {d}"
    assert d["kernel_listings_kept"] == d["fuse_opendirs"] > 0, d
    # ls -l of a kept directory: the entries' attributes are the kernel's too.
    chunk_dir = m.path(f"{entry['path']}/{os.path.dirname(sorted(expected)[0])}")
    subprocess.run(["ls", "-l", str(chunk_dir)], capture_output=True, check=True)
    before = stats(m)
    out = subprocess.run(["ls", "-l", str(chunk_dir)], capture_output=True, text=True, check=True).stdout
    d = delta(before, stats(m))
    assert (d["fuse_readdirs"], d["fuse_lookups"], d["fuse_getattrs"]) == (0, 0, 0), d
    sizes = {line.split()[-1]: int(line.split()[4]) for line in out.splitlines() if line.startswith("-")}
    for key, data in expected.items():
        if os.path.dirname(key) == os.path.dirname(sorted(expected)[0]):
            assert sizes[os.path.basename(key)] == len(data), key


def test_a_local_mount_with_a_short_ttl_lists_through_the_daemon_every_time(mounter, tree):
    entry = sharded_entry(tree)
    m = mounter(tree.root, "--read-only", "--metadata-ttl", "1")
    first = find(m.path(entry["path"]))
    before = stats(m)
    assert find(m.path(entry["path"])) == first
    d = delta(before, stats(m))
    assert d["fuse_readdirs"] > 0 and d["kernel_listings_kept"] == 0, d


def test_a_read_only_local_mount_keeps_listings(mounter, tree):
    entry = sharded_entry(tree)
    m = mounter(tree.root, "--read-only")
    first = find(m.path(entry["path"]))
    before = stats(m)
    assert find(m.path(entry["path"])) == first
    d = delta(before, stats(m))
    assert d["fuse_readdirs"] == 0 and d["kernel_listings_kept"] > 0, d


def test_a_kept_listing_shows_this_mounts_changes_at_once(mounter, tmp_path):
    spec = payload_spec("arr", shape=(16, 16), shard=(8, 8))
    root = tmp_path / "src"
    build(root, [spec])
    m = mount_writable(mounter, root, "--metadata-ttl", "60")
    a, b = si.chunk_key((0, 0), spec.cke), si.chunk_key((0, 1), spec.cke)
    os.makedirs(m.path(f"arr/{os.path.dirname(a)}"), exist_ok=True)
    m.path(f"arr/{a}").write_bytes(b"A" * 16)
    chunk_dir = m.path(f"arr/{os.path.dirname(a)}")
    assert names(chunk_dir) == {os.path.basename(a)}
    assert names(chunk_dir) == {os.path.basename(a)}  # kept
    m.path(f"arr/{b}").write_bytes(b"B" * 16)
    assert names(chunk_dir) == {os.path.basename(a), os.path.basename(b)}, "a created chunk is missing"
    c = si.chunk_key((0, 2), spec.cke)
    os.rename(m.path(f"arr/{b}"), m.path(f"arr/{c}"))
    assert names(chunk_dir) == {os.path.basename(a), "2"}, "a renamed chunk shows its old name"
    os.unlink(m.path(f"arr/{a}"))
    assert names(chunk_dir) == {"2"}, "a removed chunk is still listed"
    assert m.path(f"arr/{c}").read_bytes() == b"B" * 16
    # Chunk directories made and removed in a kept listing of the array's c/.
    top = m.path(f"arr/{os.path.dirname(os.path.dirname(a))}")
    before = names(top)
    assert names(top) == before
    os.mkdir(top / "3")
    assert names(top) == before | {"3"}, "a made directory is missing"
    os.rmdir(top / "3")
    assert names(top) == before, "a removed directory is still listed"


def test_a_kept_listing_shows_another_mounts_changes_once_the_ttl_passed(mounter, tmp_path):
    spec = payload_spec("arr", shape=(16, 16), shard=(8, 8))
    root = tmp_path / "src"
    build(root, [spec])
    writer = mount_writable(mounter, root)
    a, b = si.chunk_key((0, 0), spec.cke), si.chunk_key((0, 1), spec.cke)
    os.makedirs(writer.path(f"arr/{os.path.dirname(a)}"), exist_ok=True)
    writer.path(f"arr/{a}").write_bytes(b"A" * 16)
    reader = mounter(root, "--read-only", "--metadata-ttl", "10")
    chunk_dir = reader.path(f"arr/{os.path.dirname(a)}")
    assert names(chunk_dir) == {os.path.basename(a)}
    before = stats(reader)
    assert names(chunk_dir) == {os.path.basename(a)}
    assert delta(before, stats(reader))["fuse_readdirs"] == 0, "the listing was not kept"
    writer.path(f"arr/{b}").write_bytes(b"B" * 16)
    os.unlink(writer.path(f"arr/{a}"))
    time.sleep(10.5)
    before = stats(reader)
    assert names(chunk_dir) == {os.path.basename(b)}, "another mount's changes not seen after the TTL"
    assert delta(before, stats(reader))["fuse_readdirs"] >= 1
    assert reader.path(f"arr/{b}").read_bytes() == b"B" * 16
