"""The write journal (the default of writable remote mounts): a closed chunk file is durable on
local disk when close() returns, committed to the store in batches, and committed by the next
mount after a kill -9. Through real S3 mounts (moto): closed-then-killed files survive, a torn
record is dropped and never committed, a replay merges with what another writer committed to
the same shard meanwhile, a removal is never undone, one mount per journal, `zarrfs stats`
and `zarrfs unmount` say what waits, and the default journal directory is per source and
mountpoint. Every check compares chunk bytes read back from the store by a fresh mount."""
import os
import signal
import subprocess
from pathlib import Path

import pytest

import seed_remote as SR  # scripts/ is on sys.path (conftest)
from helpers import mount_stats
from mounting import MountError, pid_alive, wait_until
from remote import remote, remote_view  # noqa: F401
from writing import build, payload, payload_spec

ARRAY = "j/a"
SPEC = payload_spec(ARRAY)  # uint8 16x16, shards 8x8 of 4x4 inner chunks: 16 bytes a chunk
LONG = ("--write-back-delay", "600")  # nothing is committed behind the test's back


@pytest.fixture
def seeded(remote, tmp_path):  # noqa: F811
    """A fresh S3 prefix holding the empty payload array; returns the prefix."""
    local = tmp_path / "seed"
    build(local, [SPEC])
    return remote.seed("s3", local, f"journal-{os.urandom(4).hex()}")


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)  # as zarr-python makes chunk directories
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)  # the close that the journal makes durable


def stored(remote_view, prefix: str, keys: list[str]) -> dict:  # noqa: F811
    """Each chunk key's bytes as a fresh read-only mount of the prefix shows them (None: none)."""
    view = remote_view("s3", "--read-only", prefix=prefix)
    try:
        out = {}
        for key in keys:
            p = view.path(f"{ARRAY}/{key}")
            out[key] = p.read_bytes() if p.exists() else None
        return out
    finally:
        view.stop()


def kill_9(view) -> None:
    for pid in view.pids:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not any(pid_alive(p) for p in view.pids), 10)
    view.stop()  # detach the dead mount


def segments(journal: Path) -> list[Path]:
    return sorted(journal.glob("seg-*.zj"))


def written(seg: Path) -> int:
    """How far a segment is written: segments are zero-filled ahead of use."""
    return len(seg.read_bytes().rstrip(b"\0"))


def test_closed_files_survive_kill_9_and_are_committed_by_the_next_mount(remote_view, seeded, tmp_path):  # noqa: F811
    journal = tmp_path / "journal"
    view = remote_view("s3", "--journal-dir", str(journal), *LONG, prefix=seeded)
    keys = ["c/0/0", "c/0/1", "c/1/0", "c/3/3"]  # three in shard (0, 0), one in (1, 1)
    for n, key in enumerate(keys):
        write(view.path(f"{ARRAY}/{key}"), payload(1, n, 1))
    # The mount shows them; the store does not have them yet; the journal does.
    assert {k: view.path(f"{ARRAY}/{k}").read_bytes() for k in keys} == {
        k: payload(1, n, 1) for n, k in enumerate(keys)}
    assert stored(remote_view, seeded, keys) == {k: None for k in keys}
    assert segments(journal), "nothing in the journal"
    kill_9(view)

    again = remote_view("s3", "--journal-dir", str(journal), *LONG, prefix=seeded)
    log = again.log_text()
    assert "committed what an earlier mount left files=4" in log, log[-2000:]
    assert stored(remote_view, seeded, keys) == {k: payload(1, n, 1) for n, k in enumerate(keys)}
    assert segments(journal) == [], "the journal holds what is committed"
    again.stop()


def test_a_torn_record_is_dropped_never_committed(remote_view, seeded, tmp_path):  # noqa: F811
    journal = tmp_path / "journal"
    view = remote_view("s3", "--journal-dir", str(journal), *LONG, prefix=seeded)
    write(view.path(f"{ARRAY}/c/0/0"), payload(1, 0, 1))
    write(view.path(f"{ARRAY}/c/2/2"), payload(1, 1, 1))
    kill_9(view)
    # A crash in the middle of the second record's write: its last bytes never reached disk.
    [seg] = segments(journal)
    with open(seg, "r+b") as f:
        f.truncate(written(seg) - 7)

    again = remote_view("s3", "--journal-dir", str(journal), *LONG, prefix=seeded)
    log = again.log_text()
    assert "dropped a torn record" in log and "files=1" in log, log[-2000:]
    again.stop()
    assert stored(remote_view, seeded, ["c/0/0", "c/2/2"]) == {"c/0/0": payload(1, 0, 1), "c/2/2": None}


def test_a_corrupt_record_is_dropped_with_what_follows_it(remote_view, seeded, tmp_path):  # noqa: F811
    journal = tmp_path / "journal"
    view = remote_view("s3", "--journal-dir", str(journal), *LONG, prefix=seeded)
    write(view.path(f"{ARRAY}/c/0/0"), payload(1, 0, 1))
    first_len = written(segments(journal)[0])
    write(view.path(f"{ARRAY}/c/0/1"), payload(1, 1, 1))
    write(view.path(f"{ARRAY}/c/1/1"), payload(1, 2, 1))
    kill_9(view)
    [seg] = segments(journal)
    data = bytearray(seg.read_bytes())
    data[first_len + 40] ^= 0xFF  # inside the second record's content
    seg.write_bytes(bytes(data))

    again = remote_view("s3", "--journal-dir", str(journal), *LONG, prefix=seeded)
    assert "dropped a torn record" in again.log_text()
    again.stop()
    assert stored(remote_view, seeded, ["c/0/0", "c/0/1", "c/1/1"]) == {
        "c/0/0": payload(1, 0, 1), "c/0/1": None, "c/1/1": None}


def test_a_replay_keeps_what_another_writer_committed_to_the_same_shard(remote_view, seeded, tmp_path):  # noqa: F811
    journal = tmp_path / "journal"
    view = remote_view("s3", "--journal-dir", str(journal), *LONG, prefix=seeded)
    write(view.path(f"{ARRAY}/c/0/0"), payload(1, 0, 1))
    kill_9(view)
    # Meanwhile another mount commits a chunk of the same shard at close.
    other = remote_view("s3", "--no-journal", prefix=seeded)
    write(other.path(f"{ARRAY}/c/1/1"), payload(2, 0, 1))
    other.stop()

    again = remote_view("s3", "--journal-dir", str(journal), *LONG, prefix=seeded)
    again.stop()
    assert stored(remote_view, seeded, ["c/0/0", "c/1/1"]) == {
        "c/0/0": payload(1, 0, 1), "c/1/1": payload(2, 0, 1)}


def test_a_replay_never_commits_again_what_was_committed_and_since_overwritten(remote_view, seeded, tmp_path):  # noqa: F811
    # A file committed by write-back, then overwritten by another mount; a later file is still
    # pending (so their segment stays) when the first mount is killed. Its replay must not
    # commit the first file again over the other mount's write: a done record says it was
    # committed (the segment being written stays until full, done records and all).
    journal = tmp_path / "journal"
    view = remote_view("s3", "--journal-dir", str(journal), *LONG, prefix=seeded)
    path = view.path(f"{ARRAY}/c/0/0")
    write(path, payload(1, 0, 1))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # committed: its record is done
    finally:
        os.close(fd)
    other = remote_view("s3", "--no-journal", prefix=seeded)
    write(other.path(f"{ARRAY}/c/0/0"), payload(2, 0, 1))
    other.stop()
    write(view.path(f"{ARRAY}/c/2/2"), payload(1, 1, 1))
    assert len(segments(journal)) == 1, "both records in one segment"
    kill_9(view)

    again = remote_view("s3", "--journal-dir", str(journal), *LONG, prefix=seeded)
    assert "files=1" in again.log_text(), again.log_text()[-2000:]
    again.stop()
    assert stored(remote_view, seeded, ["c/0/0", "c/2/2"]) == {
        "c/0/0": payload(2, 0, 1), "c/2/2": payload(1, 1, 1)}


def test_a_replay_does_not_bring_back_what_was_removed_or_renamed_away(remote_view, seeded, tmp_path):  # noqa: F811
    journal = tmp_path / "journal"
    view = remote_view("s3", "--journal-dir", str(journal), *LONG, prefix=seeded)
    a = view.path(ARRAY)
    write(a / "c/0/0", payload(1, 0, 1))
    write(a / "c/0/1", payload(1, 1, 1))
    write(a / "c/1/0", payload(1, 2, 1))
    (a / "c/0/0").unlink()
    os.rename(a / "c/0/1", a / "c/1/1")
    write(a / "c/1/0", payload(1, 2, 2))  # rewritten: the newer content wins
    kill_9(view)

    again = remote_view("s3", "--journal-dir", str(journal), *LONG, prefix=seeded)
    again.stop()
    assert stored(remote_view, seeded, ["c/0/0", "c/0/1", "c/1/1", "c/1/0"]) == {
        "c/0/0": None, "c/0/1": None, "c/1/1": payload(1, 1, 1), "c/1/0": payload(1, 2, 2)}


def test_one_mount_per_journal_and_only_its_own_source(remote_view, remote, seeded, tmp_path):  # noqa: F811
    journal = tmp_path / "journal"
    view = remote_view("s3", "--journal-dir", str(journal), *LONG, prefix=seeded)
    with pytest.raises(MountError) as refused:
        remote_view("s3", "--journal-dir", str(journal), prefix=seeded)
    assert "in use by another mount" in str(refused.value) and "--journal-dir" in str(refused.value)
    write(view.path(f"{ARRAY}/c/0/0"), payload(1, 0, 1))
    kill_9(view)
    local = tmp_path / "other"
    build(local, [SPEC])
    other = remote.seed("s3", local, f"journal-other-{os.urandom(4).hex()}")
    with pytest.raises(MountError) as refused:
        remote_view("s3", "--journal-dir", str(journal), prefix=other)
    message = str(refused.value)
    assert "holds uncommitted writes of s3://" in message and seeded in message, message
    # Nothing was committed to the other source, and the journal still holds the write.
    assert stored(remote_view, other, ["c/0/0"]) == {"c/0/0": None}
    assert segments(journal)


def test_stats_and_unmount_say_what_waits_and_when_it_is_committed(remote_view, zarrfs_bin, seeded, tmp_path):  # noqa: F811
    journal = tmp_path / "journal"
    view = remote_view("s3", "--journal-dir", str(journal), *LONG, prefix=seeded)
    for n in range(3):
        write(view.path(f"{ARRAY}/c/2/{n}"), payload(1, n, 1))
    text = subprocess.run([str(zarrfs_bin), "stats", str(view.path())], capture_output=True,
                          text=True, check=True).stdout
    assert "journal         3 files (48 B) closed and durable on local disk" in text, text
    res = subprocess.run([str(zarrfs_bin), "unmount", str(view.path())], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "committing 3 closed files (48 B)" in res.stderr, res.stderr
    assert "every closed file of" in res.stderr and "is in the store" in res.stderr, res.stderr
    assert stored(remote_view, seeded, [f"c/2/{n}" for n in range(3)]) == {
        f"c/2/{n}": payload(1, n, 1) for n in range(3)}
    assert segments(journal) == []


def test_fsync_commits_and_the_default_journal_is_per_source_and_mountpoint(remote_view, seeded, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    view = remote_view("s3", *LONG, prefix=seeded)  # the journal is the default
    [journal] = list((tmp_path / "cache" / "zarrfs" / "journal").iterdir())
    # Named for the source (its end) and, by a hash, the mountpoint.
    assert seeded.rsplit("/", 1)[1] in journal.name, journal.name
    assert (journal / "source").read_text() == view.source
    path = view.path(f"{ARRAY}/c/3/0")
    write(path, payload(1, 0, 1))
    assert segments(journal)
    assert mount_stats(view.path())["journal_pending_files"] == 1
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # commits everything pending
    finally:
        os.close(fd)
    assert mount_stats(view.path())["journal_pending_files"] == 0
    assert stored(remote_view, seeded, ["c/3/0"]) == {"c/3/0": payload(1, 0, 1)}
    # The segment being written stays while mounted (a done record says its file is
    # committed); an unmount with nothing pending leaves none.
    view.stop()
    assert segments(journal) == [] and not (journal / "spare.zj").exists()


def test_xarray_appends_and_adds_a_variable_through_a_journaled_mount_at_latency(remote_view, remote, tmp_path):  # noqa: F811
    """xarray's to_zarr (append_dim into the sharded variable, then a new sharded variable)
    through an S3 mount with default settings behind a 20 ms round trip: after `zarrfs
    unmount`, the store read directly (not through zarrfs) holds exactly the dataset."""
    import numpy as np
    import xarray as xr

    from latency import DelayProxy
    from remote import download_tree

    rng = np.random.default_rng(24)
    first = rng.integers(0, 1000, (16, 32)).astype("int32")
    more = rng.integers(0, 1000, (12, 32)).astype("int32")
    local = tmp_path / "ds"
    enc = {"t": {"chunks": (4, 8), "shards": (8, 16)}}
    xr.Dataset({"t": (("time", "x"), first)}).to_zarr(local, zarr_format=3, encoding=enc, consolidated=True)
    prefix = remote.seed("s3", local, f"journal-xr-{os.urandom(4).hex()}")
    proxy = DelayProxy(SR.port("s3"), 20, tmp_path)
    try:
        view = remote_view("s3", "--endpoint-url", f"http://127.0.0.1:{proxy.port}", prefix=prefix)
        xr.Dataset({"t": (("time", "x"), more)}).to_zarr(view.path(), append_dim="time")
        u = rng.normal(size=(28, 32)).astype("float32")
        xr.Dataset({"u": (("time", "x"), u)}).to_zarr(
            view.path(), mode="a", encoding={"u": {"chunks": (4, 8), "shards": (28, 16)}})
        res = subprocess.run([str(view.binary), "unmount", str(view.path())], capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0, res.stderr
    finally:
        proxy.close()
    got = xr.open_zarr(download_tree("s3", prefix, tmp_path / "got")).load()
    np.testing.assert_array_equal(got.t.values, np.concatenate([first, more]))
    np.testing.assert_array_equal(got.u.values, u)


def test_a_full_journal_makes_a_close_commit_first(remote_view, seeded, tmp_path):  # noqa: F811
    """--write-buffer-size bounds what waits in the journal: a close that finds it full commits
    what is pending before it journals its own file, instead of failing."""
    journal = tmp_path / "journal"
    view = remote_view("s3", "--journal-dir", str(journal), "--write-buffer-size", "32", *LONG,
                       prefix=seeded)
    keys = ["c/0/0", "c/0/1", "c/1/0", "c/1/1", "c/2/2"]
    peak = 0
    for n, key in enumerate(keys):
        write(view.path(f"{ARRAY}/{key}"), payload(1, n, 1))
        peak = max(peak, mount_stats(view.path())["journal_pending_bytes"])
    assert peak <= 32, f"{peak} bytes waited in a journal of 32"
    # The first four were committed by the closes that found the journal full; the last waits.
    assert stored(remote_view, seeded, keys) == {
        k: (payload(1, n, 1) if n < 4 else None) for n, k in enumerate(keys)}
    view.stop()
    assert stored(remote_view, seeded, keys[4:]) == {keys[4]: payload(1, 4, 1)}
