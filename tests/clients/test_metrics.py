"""The Prometheus endpoint (`--metrics-address`, docs/metrics.md), scraped by a real Prometheus
server every second:
  - after a known workload (every chunk file of one array read once), Prometheus holds the
    same store GETs as `zarrfs stats --json` (one source), the store-latency histogram counts
    exactly those GETs, the FUSE read histogram counts every read the kernel sent and they all
    land in the buckets a local read belongs in (under 1 s, none above);
  - the exposition parses with the Python `prometheus_client` parser, with the expected types
    and no label value that is a path or key;
  - a write through a journaled mount is timed in the journal-append and shard-commit
    histograms, and the journal's backlog gauges return to 0 once committed;
  - a port alone listens on loopback only; beyond loopback is refused without
    --metrics-allow-remote; a taken port fails the mount with a clear message before it is live.
"""
import json
import shutil
import socket
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import MountError, run_zarrfs
from helpers import walk_files
from prometheus import Prometheus, free_port

ARRAY = "ts/u8_2d_end_crc_blosc"


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def zarrfs_stats(zarrfs_bin, mount) -> dict:
    res = run_zarrfs(zarrfs_bin, "stats", mount.path(), "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture
def prometheus_for(tmp_path):
    servers = []

    def start(port: int) -> Prometheus:
        servers.append(Prometheus(tmp_path / f"prometheus{len(servers)}", [f"127.0.0.1:{port}"]))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def test_prometheus_scrapes_what_the_workload_did(mounter, tree, zarrfs_bin, prometheus_for):
    port = free_port()
    view = mounter(tree.root, "--read-only", "--metrics-address", str(port))
    prom = prometheus_for(port)
    assert prom.wait_for('up{job="zarrfs"}', 1.0) == 1.0, "Prometheus never reached the mount"
    files = walk_files(view.path(ARRAY))
    chunk_files = {rel: p for rel, p in files.items() if rel.startswith("c")}
    assert len(chunk_files) >= 4, files.keys()
    read_bytes = sum(len(p.read_bytes()) for p in chunk_files.values())
    assert read_bytes > 0
    truth = zarrfs_stats(zarrfs_bin, view)
    gets = float(truth["get"])
    assert gets >= 1
    # A scrape after the workload: Prometheus holds the counter zarrfs stats prints.
    assert prom.wait_for("zarrfs_store_get_requests_total", gets) == gets
    assert prom.value("zarrfs_store_get_bytes_total") == float(truth["get_bytes"])
    assert prom.value('sum(zarrfs_store_request_duration_seconds_count{kind="get"})') == gets
    assert prom.value("zarrfs_fuse_reads_total") == float(truth["fuse_reads"])
    reads = prom.value('zarrfs_fuse_request_duration_seconds_count{operation="read"}')
    assert reads == float(truth["latency_read_count"]) and reads >= 1
    # Local reads answer well under a second: every one at or below le=1.048576, none above.
    assert prom.value('zarrfs_fuse_request_duration_seconds_bucket{operation="read",le="1.048576"}') == reads
    assert prom.value('zarrfs_fuse_request_duration_seconds_bucket{operation="read",le="+Inf"}') == reads
    below_4us = prom.value('zarrfs_fuse_request_duration_seconds_bucket{operation="read",le="4e-06"}')
    assert below_4us is not None and below_4us < reads, "a read through FUSE takes more than 4 µs"
    total_seconds = prom.value('zarrfs_fuse_request_duration_seconds_sum{operation="read"}')
    assert 0 < total_seconds < reads * 1.048576
    assert prom.value("zarrfs_inodes_held") == float(zarrfs_stats(zarrfs_bin, view)["inodes_held"])
    assert prom.value("zarrfs_daemon_rss_bytes") > 1 << 20
    assert prom.value('zarrfs_build_info{version!=""}') == 1.0


def test_the_exposition_parses_with_bounded_labels(mounter, tree):
    port = free_port()
    view = mounter(tree.root, "--read-only", "--metrics-address", str(port))
    for p in walk_files(view.path(ARRAY)).values():
        p.read_bytes()
    families = {f.name: f for f in text_string_to_metric_families(scrape(port))}
    assert families["zarrfs_store_get_requests"].type == "counter"
    assert families["zarrfs_inodes_held"].type == "gauge"
    assert families["zarrfs_fuse_request_duration_seconds"].type == "histogram"
    assert families["zarrfs_store_request_duration_seconds"].type == "histogram"
    assert families["zarrfs_shard_commit_duration_seconds"].type == "histogram"
    build = families["zarrfs_build_info"]
    assert [(s.value, set(s.labels)) for s in build.samples] == [(1.0, {"version"})]
    labels = {(k, v) for f in families.values() for s in f.samples for k, v in s.labels.items()}
    assert {k for k, _ in labels} <= {"operation", "kind", "outcome", "le", "version"}, labels
    assert not any("/" in v or "." in v and k != "le" and k != "version" for k, v in labels), labels
    kinds = {v for k, v in labels if k == "kind"}
    assert kinds == {"get", "put", "list", "head", "delete"}
    read = [s for s in families["zarrfs_fuse_request_duration_seconds"].samples
            if s.name.endswith("_count") and s.labels["operation"] == "read"]
    assert read and read[0].value >= 1


def test_loopback_by_default_and_refusals(mounter, tree, zarrfs_bin, tmp_path):
    port = free_port()
    view = mounter(tree.root, "--read-only", "--metrics-address", str(port))
    listening = [line for line in open("/proc/net/tcp").read().splitlines()[1:]
                 if line.split()[1].endswith(f":{port:04X}") and line.split()[3] == "0A"]
    assert [line.split()[1] for line in listening] == [f"0100007F:{port:04X}"], listening
    # The port is taken now (by that mount): a second mount fails before it is live.
    with pytest.raises(MountError) as failed:
        mounter(tree.root, "--read-only", "--metrics-address", f"127.0.0.1:{port}")
    assert f"127.0.0.1:{port}" in str(failed.value) and "taken" in str(failed.value)
    assert view.is_mounted()
    refused = run_zarrfs(zarrfs_bin, "mount", tree.root, tmp_path, "--metrics-address", "0.0.0.0:9")
    assert refused.returncode != 0
    assert "not a loopback address" in refused.stderr and "--metrics-allow-remote" in refused.stderr
    # The same through -o, as fstab writes it.
    refused = run_zarrfs(zarrfs_bin, "mount", tree.root, tmp_path, "-o", "ro,metrics_address=0.0.0.0:9")
    assert "--metrics-allow-remote" in refused.stderr, refused.stderr
    with socket.socket() as s:
        s.settimeout(2)
        s.connect(("127.0.0.1", port))


def test_writes_time_journal_appends_and_commits(mounter, tree, tmp_path):
    """A write through a journaled mount: one journal append per close, the shard committed
    about a second later, both in their histograms; the backlog gauges go back to 0."""
    source = tmp_path / "src"
    shutil.copytree(tree.root / ARRAY, source / "a")
    shutil.copy(tree.root / "zarr.json", source / "zarr.json")
    port = free_port()
    view = mounter(source, "--journal", "--journal-dir", tmp_path / "journal",
                   "--metrics-address", str(port))
    chunks = sorted(rel for rel in walk_files(view.path("a")) if rel.startswith("c"))[:3]
    for rel in chunks:
        p = view.path("a") / rel
        data = p.read_bytes()
        with open(p, "wb") as f:
            f.write(data)

    def samples():
        families = text_string_to_metric_families(scrape(port))
        return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}

    first = samples()
    assert first[("zarrfs_journal_append_duration_seconds_count", ())] >= len(chunks)
    assert ("zarrfs_journal_oldest_pending_seconds", ()) in first
    # A journal writes back after its delay: the write-back age is served too, never a counter.
    assert ("zarrfs_write_back_oldest_pending_seconds", ()) in first
    assert not any(name.endswith("pending_ms_total") for name, _ in first), sorted(first)
    deadline = time.monotonic() + 30
    while True:
        now = samples()
        if now[("zarrfs_journal_pending_files", ())] == 0 and now[("zarrfs_shard_commits_total", ())] >= 1:
            break
        assert time.monotonic() < deadline, now
        time.sleep(0.2)
    assert now[("zarrfs_shard_commit_duration_seconds_count", ())] == now[("zarrfs_shard_commits_total", ())]
    assert now[("zarrfs_journal_oldest_pending_seconds", ())] == 0
    assert now[("zarrfs_write_back_oldest_pending_seconds", ())] == 0
    assert now[("zarrfs_journal_pending_bytes", ())] == 0
    puts = sum(v for (name, labels), v in now.items()
               if name == "zarrfs_store_request_duration_seconds_count" and ("kind", "put") in labels)
    assert puts == now[("zarrfs_store_put_requests_total", ())] >= 1
