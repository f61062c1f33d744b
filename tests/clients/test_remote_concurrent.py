"""Concurrent writers to the same shards of a remote source (s3 and azure: the servers with
conditional writes). An empty sharded array is seeded under a fresh prefix and mounted twice
(two daemons, one prefix); two processes write alternating inner chunks of the same shards
through the two mounts (each chunk file many times, plain open/write/close, payloads naming
writer, chunk and sequence number). Every shard write of a daemon is a read-modify-write
guarded by the version it read (`If-Match` / `If-None-Match: *`), so a daemon that lost a race
must re-read and re-apply instead of replacing the other daemon's newer shard.

While they run, the shard objects are polled through the server: every poll must pass the
strict shard check, and no chunk's sequence number may ever go back (a stale shard replacing
a newer one is a lost update, even if a later write of that chunk hides it). Afterwards the
objects fetched from the bucket hold every writer's last acknowledged write and pass the
strict check. The conflicts the daemons ran into (lost races, re-read and retried: the stats
xattr's commit_conflicts, cross-checked with the commit's debug log and with the conditional
writes beyond one per acknowledged chunk write) are recorded in .cache/remote-stats.jsonl.
No write may fail, and no daemon may log a corrupt (torn) shard index read."""
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import seed_remote as SR
import shardindex as si
from remote import WRITABLE, delta, download_tree, record, remote, remote_view, stats  # noqa: F401
from writing import (CONCURRENT_WRITER as WRITER, build, lost_updates, parse_payload, payload_spec,
                     shard_problems, temp_files)

ROUNDS = 13  # x 8 chunk files per writer = 104 writes each
ARRAY = "shared/arr"
CONFLICT_LOG = "shard changed during commit"

# A shard index read that mixed two versions of the object shows up as a checksum failure.
TORN_INDEX_READ = re.compile(r"corrupt shard \S+: crc32c mismatch")



class BucketPoller:
    """Fetches the shard objects of the array through the server (one client, reused) into a
    local directory next to the array's zarr.json, for the independent parser."""

    def __init__(self, backend: str, prefix: str, shard_keys: list[str], local_meta: Path,
                 dest: Path):
        self.backend, self.shard_keys, self.dest = backend, shard_keys, dest
        self.base = SR.join_key(prefix, ARRAY)
        dest.mkdir(parents=True)
        (dest / "zarr.json").write_bytes(local_meta.read_bytes())
        if backend == "s3":
            s3 = SR.s3_client()
            self._get = lambda key: s3.get_object(Bucket=SR.BUCKET, Key=key)["Body"].read()
            self._missing = s3.exceptions.NoSuchKey
        else:
            from azure.core.exceptions import ResourceNotFoundError

            container = SR.azure_container()
            self._get = lambda key: container.get_blob_client(key).download_blob().readall()
            self._missing = ResourceNotFoundError

    def fetch(self) -> Path:
        for rel in self.shard_keys:
            p = self.dest / rel
            try:
                data = self._get(SR.join_key(self.base, rel))
            except self._missing:
                p.unlink(missing_ok=True)
                continue
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        return self.dest


def snapshot(array_dir: Path) -> tuple[dict, list]:
    """{view key: (writer, key index, seq)} of the stored shards, and their problems (strict)."""
    try:
        problems = shard_problems(array_dir)
        chunks = si.expected_chunk_files(si.load_layout(array_dir))
        return {k: parse_payload(v) for k, v in chunks.items()}, problems
    except (si.ShardError, ValueError, OSError, AssertionError) as e:
        return {}, [f"{type(e).__name__}: {e}"]


def conflicts_logged(mount) -> int:
    return len(re.findall(CONFLICT_LOG, mount.log_text()))


@pytest.mark.parametrize("backend", WRITABLE)
def test_two_remote_mounts_lose_nothing(remote_view, remote, backend, tmp_path, monkeypatch):
    spec = payload_spec(ARRAY, shape=(16, 16), shard=(8, 8))  # 4 shards of 2x2 inner chunks
    local = tmp_path / "src"
    build(local, [spec])
    prefix = remote.seed(backend, local, f"concurrent-{backend}")
    # the commit's retries are logged at debug: a cross-check of the stats' commit_conflicts
    monkeypatch.setenv("ZARRFS_RUST_LOG", "zarrfs=info,zarrfs::shard::commit=debug")
    views = [remote_view(backend, prefix=prefix) for _ in range(2)]

    keys = [si.chunk_key((i, j), spec.cke) for i in range(4) for j in range(4)]
    owned = {w: [(n, k) for n, k in enumerate(keys) if n % 2 == w] for w in (0, 1)}
    shard_keys = [si.chunk_key((i, j), spec.cke) for i in range(2) for j in range(2)]
    for view in views:  # the chunk directories c/0..c/3 (implicit: mkdir makes them appear)
        for i in range(4):
            (view.path(ARRAY) / "c" / str(i)).mkdir(parents=True, exist_ok=True)
    before = [stats(v) for v in views]
    poller = BucketPoller(backend, prefix, shard_keys, local / ARRAY / "zarr.json",
                          tmp_path / "polled")

    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(views[w].path()), ARRAY,
                               str(w), str(ROUNDS), str(go), json.dumps(owned[w])],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in (0, 1)]
    go.touch()
    seen, regressions, parse_errors, polls = {}, [], [], 0
    deadline = time.monotonic() + 45
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        state, problems = snapshot(poller.fetch())
        parse_errors += problems
        polls += 1
        for key, (_, _, seq) in state.items():
            if seq < seen.get(key, 0) and f"{key}: seq {seen[key]} then {seq}" not in regressions:
                regressions.append(f"{key}: seq {seen[key]} then {seq}")
            seen[key] = max(seen.get(key, 0), seq)
        time.sleep(0.01)
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            pytest.fail(f"a writer did not finish: {err[-2000:]}")
        assert p.returncode == 0, f"writer failed: {err[-2000:]}"
        results.append(json.loads(out))

    (a, b) = results
    overlap = min(a["end"], b["end"]) - max(a["start"], b["start"])
    writes = [r["count"] for r in results]  # acknowledged writes per mount
    counts = [delta(s, stats(v)) for v, s in zip(views, before)]
    sets = [c["set"] for c in counts]  # conditional writes, refused ones included
    retried = [conflicts_logged(v) for v in views]
    errors = [e for r in results for e in r["errors"]]
    torn = [len(TORN_INDEX_READ.findall(v.log_text())) for v in views]
    record("concurrent-write", backend=backend, writes=writes, sets=sets,
           commit_conflicts=[c.get("commit_conflicts") for c in counts],
           extra_sets=[s - w for s, w in zip(sets, writes)], conflicts_logged=retried,
           failed_writes=len(errors), torn_index_reads=torn, polls=polls,
           seconds=[round(r["end"] - r["start"], 2) for r in results], overlap=round(overlap, 2),
           heads=[c["head"] for c in counts])
    assert overlap > 0, "the writers did not run at the same time"
    assert errors == [], f"{len(errors)} writes failed: {errors[:5]}"
    assert sum(torn) == 0, f"torn shard index reads logged: {torn}"
    assert parse_errors == [], f"a shard failed the check while being written: {parse_errors[:5]}"
    assert regressions == [], (f"lost updates seen while writing ({polls} polls): "
                               f"{regressions[:10]}")
    for r in results:  # every chunk's last write acknowledged
        assert len(r["acked"]) == 8
        assert all(seq == ROUNDS for seq in r["acked"].values()), r["acked"]
    for view in views:
        assert view.alive()
    for view in views:
        view.stop()

    stored = download_tree(backend, prefix, tmp_path / "bucket")
    final, problems = snapshot(stored / ARRAY)
    assert problems == [], f"the shards in the bucket: {problems[:5]}"
    lost = lost_updates(results, owned, final)
    assert lost == [], f"{len(lost)} lost updates: {lost}"
    assert sorted(final) == sorted(keys)
    assert temp_files(stored) == []
