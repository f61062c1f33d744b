"""The metadata warm-up of a remote mount, a round trip away: what the first reads need is
fetched at mount, together, not one request per lookup step afterwards.

The daemon reaches nginx (WebDAV) through `zarrfs-delay-proxy` (tests/clients/latency.py) with a
100 ms round trip, and logs every request it sends (method, URL, range). The proxy counts round
trips of wall time ("waves"), whatever the machine's load, so nothing here is timed. The fixture
is a group `bench` of two sharded arrays under a root group, written by zarr-python, with no
consolidated metadata: every node is found by its own `zarr.json` and its listing.

  - reading a chunk file right after the mount (`cat MNT/bench/small/c/0/0`) takes at most 3
    round trips (it took 10 with one request per lookup step: the root's and each node's
    `zarr.json`, a HEAD and a listing per name, a listing per chunk directory, then the shard);
  - no request is sent twice, the mount's included (lookups wait for what the warm-up is
    fetching), and the counters say what was fetched ahead and used;
  - a `find` of the mount lists nothing again: every listing it needs was taken at mount;
  - a local source warms up nothing.
"""
from __future__ import annotations

import re
import subprocess
from collections import Counter

import numpy as np
import pytest

import seed_remote as SR
from latency import DelayProxy
from remote import delta, record, remote, settled, stats  # noqa: F401

RTT_MS = 100
SMALL = dict(shape=(64, 64), chunks=(8, 8), shards=(16, 16))      # 4 × 4 shards
LARGE = dict(shape=(192, 32), chunks=(8, 8), shards=(16, 16))     # 12 × 2 shards
REQUEST = re.compile(r" DEBUG (\S+ \S+(?: bytes=\S+)?)(?: status=\d+| dropped before its answer)")


@pytest.fixture(scope="module")
def dataset(remote, tmp_path_factory):
    """The hierarchy seeded to nginx; returns (prefix, the bytes of bench/small's chunk c/0/0)."""
    import zarr

    root = tmp_path_factory.mktemp("warm-up") / "root"
    group = zarr.open_group(root, mode="w", zarr_format=3)
    bench = group.create_group("bench")
    arrays = {}
    for name, spec in (("small", SMALL), ("large", LARGE)):
        data = (np.arange(np.prod(spec["shape"]), dtype=np.uint64) * 2654435761 % 251)
        arrays[name] = data.astype("uint8").reshape(spec["shape"])
        arr = bench.create_array(name, dtype="uint8", compressors=None, **spec)
        arr[...] = arrays[name]
    prefix = remote.seed("http", root, "warm-up")
    return prefix, arrays["small"][:8, :8].tobytes()


@pytest.fixture
def slow_view(dataset, mounter, monkeypatch, tmp_path):
    """A read-only mount through the proxy, logging its requests: (mount, proxy, chunk bytes)."""
    prefix, chunk = dataset
    monkeypatch.setenv("ZARRFS_RUST_LOG", "zarrfs=info,zarrfs::store::transport=debug")
    proxy = DelayProxy(SR.port("http"), RTT_MS, tmp_path)
    url = SR.url("http", prefix).replace(f":{SR.port('http')}/", f":{proxy.port}/")
    try:
        yield mounter(url, "--read-only"), proxy, chunk
    finally:
        proxy.close()


def sent(view) -> list[str]:
    """Every request the daemon sent (method, URL and range), in the order answered."""
    return REQUEST.findall(view.log_text())


def test_a_chunk_read_right_after_mount_takes_few_round_trips(slow_view):
    view, proxy, chunk = slow_view
    at_mount = proxy.waves()
    mark, s0 = proxy.mark(), stats(view)
    assert (view.path("bench/small") / "c" / "0" / "0").read_bytes() == chunk
    waves, d = proxy.waves(mark), delta(s0, stats(view))
    s = settled(view)
    requests = sent(view)
    record("chunk read after mount at latency", rtt_ms=RTT_MS, mount_waves=at_mount, waves=waves,
           requests=d, prefetch={k: s[k] for k in s if k.startswith(("prefetch_", "requests_"))})
    assert waves <= 3, f"the first chunk read took {waves} round trips: {d}, {requests}"
    assert d["list_dir"] == 0 and d["head"] == 0, f"the lookups asked again: {d}"
    twice = {r: n for r, n in Counter(requests).items() if n > 1}
    assert not twice, f"sent more than once: {twice}"
    assert len(requests) == s["http_requests"], "every request is in the log"
    # bench, small, large, their chunk roots and shard directories, fetched ahead and used.
    assert s["prefetch_documents"] >= 3 and s["prefetch_listings"] >= 4, s
    assert s["prefetch_used"] >= 4, s


def test_find_lists_nothing_again(slow_view):
    view, proxy, _ = slow_view
    mark, s0 = proxy.mark(), stats(view)
    res = subprocess.run(["find", str(view.path())], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    waves, d = proxy.waves(mark), delta(s0, stats(view))
    record("find after mount at latency", rtt_ms=RTT_MS, waves=waves, requests=d)
    assert f"{view.path()}/bench/large/c/23/3" in res.stdout.split()
    assert d["list_dir"] == 0, f"find listed again what the mount listed: {d}"
    twice = {r: n for r, n in Counter(sent(view)).items() if n > 1}
    assert not twice, f"sent more than once: {twice}"


def test_a_local_source_warms_up_nothing(view):
    (view.path() / "zarr.json").read_bytes()
    s = stats(view)
    assert (s["prefetch_documents"], s["prefetch_listings"], s["prefetch_used"]) == (0, 0, 0), s
