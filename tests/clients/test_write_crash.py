"""Crashes while writing (CI-sized; scripts/dev/crash_loop.py runs the long campaigns): a foreground
mount takes a stream of chunk writes from four threads (self-describing payloads), and every
daemon pid is killed with SIGKILL at a seeded random moment. While it writes, and after
cleaning up the dead mount, no shard or chunk in the store may be torn or unparseable (an empty
chunk committed by a late release or by write-back of a file being rewritten was found this
way), no chunk may hold a value that was never written; in the default mode every write whose close() returned is in the store (the write in
flight may or may not be), in write-back mode every write whose fsync() returned. In journal
mode (--journal-dir) every write whose fsync() returned is in the store after the kill, and
every write whose close() returned once the remount has replayed the journal; the remount's
unmount leaves no journal segment. A remount shows exactly the store, hides and sweeps the
temporary files the kill left (local source), and finds no stray object or unfinished upload
(S3). tests/clients/crashing.py has the workload and the checks; the last tests show that the
checks do catch torn shards and lost writes, and a journal lost between the kill and the
remount."""
import shutil

import pytest

import crashing as C
from remote import remote  # noqa: F401 - the session fixture that starts the servers

LOCAL_ROUNDS = 6
S3_ROUNDS = 2
# Journal rounds read the store once more (after the replay): fewer of them locally.
ROUNDS = {("local", "journal"): 4}
UNSHARDED_ROUNDS = 5
MODES = ["default", "writeback", "journal"]


def run_rounds(loop: C.CrashLoop, rounds: int) -> list:
    results = loop.run(rounds)
    for r in results:
        print(r.line())
    failures = [f"round {r.round}: {f}" for r in results for f in r.failures]
    logs = "\n".join(r.log_tail for r in results if r.failures)[-4000:]
    assert failures == [], f"{failures[:12]}\n--- daemon log ---\n{logs}"
    assert all(r.acks > 0 and r.in_flight > 0 for r in results), "a round wrote nothing"
    if loop.write_back:
        assert sum(r.synced for r in results) > 0, "no fsync was acknowledged"
    if loop.journaled:  # the kills left writes only in the journal, and the remounts replayed them
        assert sum(r.pending for r in results) > 0, "no round left an acknowledged write uncommitted"
        assert sum(r.replayed for r in results) > 0, "no remount replayed a journaled file"
    return results


@pytest.mark.parametrize("mode", MODES)
def test_kill_during_local_writes(zarrfs_bin, tmp_path, mode):
    # At least 40 acknowledgements: one thread has written 10 times, so fsynced at least once.
    loop = C.CrashLoop(zarrfs_bin, tmp_path, C.LocalSource(tmp_path / "src"), mode, seed=11,
                       kill_acks=(40, 300))
    run_rounds(loop, ROUNDS.get(("local", mode), LOCAL_ROUNDS))


@pytest.mark.parametrize("mode", MODES)
def test_kill_during_local_unsharded_writes(zarrfs_bin, tmp_path, mode):
    # Chunk files stored as they are: closed into the journal in journal mode, each committed
    # by itself (a rename of a temporary file) in the others.
    loop = C.CrashLoop(zarrfs_bin, tmp_path, C.LocalSource(tmp_path / "src", "unsharded"), mode,
                       seed=12, kill_acks=(40, 300))
    run_rounds(loop, UNSHARDED_ROUNDS)


@pytest.mark.parametrize("mode", MODES)
def test_kill_during_s3_writes(zarrfs_bin, tmp_path, remote, mode):  # noqa: F811
    remote.ensure("s3")
    source = C.S3Source(tmp_path, f"{remote.run}/crash-{mode}")  # deleted with the run prefix
    # At least 16 acknowledgements; write-back: an fsync every 3rd write, so one thread has
    # fsynced (journal mode draws its own: none, or every 10th).
    loop = C.CrashLoop(zarrfs_bin, tmp_path, source, mode, seed=11, kill_acks=(16, 40),
                       sync_every=(3,) if mode == "writeback" else None)
    run_rounds(loop, ROUNDS.get(("s3", mode), S3_ROUNDS))


@pytest.mark.parametrize("mode", ["default", "journal"])
def test_kill_during_s3_unsharded_writes(zarrfs_bin, tmp_path, remote, mode):  # noqa: F811
    # Journal mode: every closed file waits in the journal (remote sources' default), and the
    # remount stores it.
    remote.ensure("s3")
    source = C.S3Source(tmp_path, f"{remote.run}/crash-flat-{mode}", "unsharded")
    loop = C.CrashLoop(zarrfs_bin, tmp_path, source, mode, seed=12, kill_acks=(16, 40))
    run_rounds(loop, S3_ROUNDS)


def test_the_checks_catch_torn_and_lost_unsharded_chunks(zarrfs_bin, tmp_path):
    loop = C.CrashLoop(zarrfs_bin, tmp_path, C.LocalSource(tmp_path / "src", "unsharded"), "default",
                       seed=3, kill_acks=(40, 60))
    run_rounds(loop, 1)
    stored = loop.previous
    assert len(stored) == len(loop.keys) and all(s is not None for s in stored.values()), stored
    array = loop.source.root / C.ARRAY
    base = 10 ** 9

    def check(array_dir, **record) -> C.RoundResult:
        result = C.RoundResult(0)
        C.check_store(array_dir, C.Record(loop.keys, base, 4, **record), stored, False, result)
        return result

    assert check(array).failures == []
    broken = tmp_path / "broken"
    shutil.copytree(array, broken)
    (broken / "c/0/1").write_bytes((broken / "c/0/1").read_bytes()[:-1])  # cut short
    assert check(broken).torn, "a cut chunk passed"
    (broken / "c/0/1").write_bytes((broken / "c/1/1").read_bytes())  # another key's value
    assert check(broken).invented, "a misplaced value passed"
    (broken / "c/0/1").unlink()
    assert check(broken).lost_acked, "a lost chunk passed"
    (broken / "c/9").mkdir()
    (broken / "c/9/9").write_bytes(b"x")
    assert C.stored_problems(broken), "a stray file passed"


def test_the_checks_catch_torn_shards_and_lost_writes(zarrfs_bin, tmp_path):
    loop = C.CrashLoop(zarrfs_bin, tmp_path, C.LocalSource(tmp_path / "src"), "default", seed=3,
                       kill_acks=(40, 60))
    run_rounds(loop, 1)
    stored = loop.previous  # {key: seq} after the round's remount: every key of the 4 shards
    assert len(stored) == len(loop.keys) and all(s is not None for s in stored.values()), stored
    array = loop.source.root / C.ARRAY
    base = 10 ** 9  # a round that wrote nothing new: only the stored values are "written"

    def check(array_dir, write_back=False, **record) -> C.RoundResult:
        result = C.RoundResult(0)
        C.check_store(array_dir, C.Record(loop.keys, base, 4, **record), stored, write_back, result)
        return result

    assert check(array).failures == []
    key = loop.keys[5]
    # an acknowledged write the store does not hold; a fsynced one in write-back mode
    assert check(array, acked={key: base + 3}).lost_acked, "a lost acknowledged write passed"
    assert check(array, True, acked={key: base + 3}, synced={key: base + 3}).lost_synced
    assert check(array, True, acked={key: base + 3}).failures == []  # closed only: may be lost
    # a torn shard (its last byte missing: the index at the end does not decode)
    torn = tmp_path / "torn"
    shutil.copytree(array, torn)
    shard = torn / "c/0/1"
    shard.write_bytes(shard.read_bytes()[:-1])
    assert check(torn).torn, "a torn shard passed"
    # two shards swapped: each chunk holds another key's payload (never written there)
    swapped = tmp_path / "swapped"
    shutil.copytree(array, swapped)
    a, b = (swapped / "c/0/0").read_bytes(), (swapped / "c/1/1").read_bytes()
    (swapped / "c/0/0").write_bytes(b)
    (swapped / "c/1/1").write_bytes(a)
    assert check(swapped).invented, "misplaced values passed"
    # a shard gone: its chunks' committed values are lost
    (swapped / "c/0/0").unlink()
    assert check(swapped).lost_acked


def test_the_checks_catch_a_lost_journal(zarrfs_bin, tmp_path):
    # Write-back 30 s and no fsync: nothing is committed before the kill, every acknowledged
    # write is only in the journal. A first round replays it; a second loses it before the
    # remount (as a journal on a disk that did not survive), and the checks say so.
    loop = C.CrashLoop(zarrfs_bin, tmp_path, C.LocalSource(tmp_path / "src"), "journal", seed=5,
                       kill_acks=(20, 40), journal_delays=(30.0,), sync_every=(0,))
    kept = loop.round(0)
    assert kept.failures == [], f"{kept.failures[:8]}\n{kept.log_tail[-3000:]}"
    assert kept.pending > 0 and kept.replayed >= kept.pending, kept.line()
    loop.before_remount = lambda lp: shutil.rmtree(lp.journal_dir)
    # Under load the writer can have completed whole shards by the kill, which are committed at
    # once: a round that leaves nothing pending proves nothing, so the next one is tried.
    for n in range(1, 5):
        lost = loop.round(n)
        assert lost.failures == [] or lost.pending > 0, lost.failures
        if lost.pending > 0:
            break
    assert lost.pending > 0, lost.line()
    after_replay = [p for p in lost.lost_acked if p.startswith("after the remount's replay: ")]
    assert after_replay and after_replay == lost.lost_acked, lost.failures
    assert any("logged no replay of the journal" in p for p in lost.other), lost.failures
    assert lost.torn == [] and lost.invented == [], lost.failures
