"""Concurrent writers to the same shards: two processes write alternating inner chunks of the
same shards (each chunk file many times, plain open/write/close), through two mounts of the same
source directory or through one mount. While they run, the shards in the source are polled:
every poll must parse, and no chunk's sequence number may ever go back (a stale shard replacing
a newer one is a lost update). Afterwards every chunk holds its writer's last acknowledged
write, and every shard passes the strict check."""
import json
import subprocess
import sys
import time

import pytest

import shardindex as si
from writing import (CONCURRENT_WRITER as WRITER, build, delta, lost_updates, mount_writable,
                     parse_payload, payload, payload_spec, shard_problems, stats, temp_files)

ROUNDS = 25  # x 8 chunk files per writer = 200 writes each



def snapshot(array_dir) -> tuple[dict, list]:
    """{view key: (writer, key index, seq)} of the store now, and parse problems."""
    try:
        layout = si.load_layout(array_dir)
        chunks = si.expected_chunk_files(layout)
    except (si.ShardError, ValueError, OSError) as e:
        return {}, [f"{type(e).__name__}: {e}"]
    return {k: parse_payload(v) for k, v in chunks.items()}, []


@pytest.mark.parametrize("mounts", [2, 1])
def test_two_writers_lose_nothing(mounter, tmp_path, mounts):
    spec = payload_spec("shared/arr", shape=(16, 16), shard=(8, 8))
    root = tmp_path / "src"
    build(root, [spec])
    views = [mount_writable(mounter, root) for _ in range(mounts)]
    keys = [si.chunk_key((i, j), spec.cke) for i in range(4) for j in range(4)]
    owned = {w: [(n, k) for n, k in enumerate(keys) if n % 2 == w] for w in (0, 1)}
    for view in views:  # the chunk directories c/0..c/3 (implicit: mkdir makes them appear)
        for i in range(4):
            (view.path(spec.path) / "c" / str(i)).mkdir(parents=True, exist_ok=True)

    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(views[w % mounts].path()),
                               spec.path, str(w), str(ROUNDS), str(go), json.dumps(owned[w])],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in (0, 1)]
    go.touch()
    seen, regressions, parse_errors, polls = {}, [], [], 0
    deadline = time.monotonic() + 90
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        state, problems = snapshot(root / spec.path)
        parse_errors += problems
        polls += 1
        for key, (_, _, seq) in state.items():
            if seq < seen.get(key, 0):
                regressions.append(f"{key}: seq {seen[key]} then {seq}")
            seen[key] = max(seen.get(key, 0), seq)
        time.sleep(0.005)
    results = []
    for p in procs:
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, f"writer failed: {err[-2000:]}"
        results.append(json.loads(out))

    (a, b) = results
    overlap = min(a["end"], b["end"]) - max(a["start"], b["start"])
    print(f"writers: {a['end'] - a['start']:.2f}s and {b['end'] - b['start']:.2f}s, "
          f"overlapping {overlap:.2f}s; {polls} polls")
    assert overlap > 0, "the writers did not run at the same time"
    errors = [e for r in results for e in r["errors"]]
    assert errors == [], f"{len(errors)} writes failed: {errors[:5]}"
    assert parse_errors == [], f"a shard did not parse while being written: {parse_errors[:5]}"
    assert regressions == [], (f"lost updates seen while writing ({polls} polls): "
                               f"{regressions[:10]}")
    final, problems = snapshot(root / spec.path)
    assert problems == []
    lost = lost_updates(results, owned, final)
    assert lost == [], f"{len(lost)} lost updates: {lost}"
    assert all(len(r["acked"]) == 8 and set(r["acked"].values()) == {ROUNDS} for r in results)
    for view in views:
        assert view.alive()
        st = stats(view)
        assert st["set"] >= 1
    for view in views:
        view.stop()
    assert shard_problems(root / spec.path) == []
    assert temp_files(root) == []


def test_parallel_closes_of_one_shard_are_committed_together(mounter, tmp_path):
    """Eight writers close chunk files of one shard at the same moment, round after round
    (as `gsutil -m cp` into the view would): what arrives while the shard's commit is in flight
    joins the next one, so there are far fewer shard commits than closes, and every close still
    returns only once its chunk is in the stored shard."""
    import threading
    spec = payload_spec("arr", shape=(16, 16), shard=(16, 16))
    root = tmp_path / "src"
    build(root, [spec])
    view = mount_writable(mounter, root)
    writers, rounds = 8, 10
    keys = [si.chunk_key((i, j), spec.cke) for i in range(4) for j in range(2)]
    for i in range(4):
        (view.path(spec.path) / "c" / str(i)).mkdir(parents=True, exist_ok=True)
    barrier = threading.Barrier(writers)
    failures = []

    def write(w):
        try:
            for seq in range(1, rounds + 1):
                barrier.wait(timeout=30)
                (view.path(spec.path) / keys[w]).write_bytes(payload(w, w, seq))
                # close() returned: the chunk is in the stored shard now.
                stored = si.expected_chunk_files(si.load_layout(root / spec.path))
                if stored.get(keys[w]) != payload(w, w, seq):
                    failures.append(f"{keys[w]} round {seq}: not stored at close")
        except Exception as e:  # noqa: BLE001 (reported below)
            failures.append(f"writer {w}: {type(e).__name__}: {e}")

    before = stats(view)
    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert failures == []
    d = delta(before, stats(view))
    closes = writers * rounds
    print(f"{closes} closes, {d['shard_commits']} shard commits, {d['set']} shard writes")
    assert d["commit_conflicts"] == 0, d
    assert d["shard_commits"] <= closes * 3 // 4, f"parallel closes were not batched: {d}"
    final = si.expected_chunk_files(si.load_layout(root / spec.path))
    assert final == {keys[w]: payload(w, w, rounds) for w in range(writers)}
