"""Write-back mode (--write-back-delay): closed chunk files are kept and committed per shard
later; they are readable through the mount meanwhile, and nothing pending is lost when the
daemon is unmounted or told to stop (SIGTERM). A copy of a whole array costs one shard write
per shard."""
import os
import signal
import subprocess

import writing as W
from mounting import pid_alive, wait_until

ARRAY = "wb/a"


def source(tmp_path):
    root = tmp_path / "src"
    W.build(root, [W.payload_spec(ARRAY)])  # 16x16 uint8, 4x4 chunks of 16 bytes, 8x8 shards
    return root


def write_chunks(view_dir, keys, seq):
    for n, key in enumerate(keys):
        path = view_dir / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(W.payload(1, n, seq))


def stored_chunks(array_dir):
    """{chunk key: bytes} as the sharded store holds them (independent parser)."""
    import shardindex as si
    return si.expected_chunk_files(si.load_layout(array_dir))


KEYS = [f"c/{i}/{j}" for i in range(4) for j in range(4)]


def test_pending_chunks_are_readable_and_committed_at_unmount(mounter, tmp_path):
    root = source(tmp_path)
    view = mounter(root, "--write-back-delay", "3600")
    partial = KEYS[:3]  # three chunks of shard c/0/0 (which holds four): stays pending
    write_chunks(view.path(ARRAY), partial, seq=1)
    for n, key in enumerate(partial):
        assert (view.path(ARRAY) / key).read_bytes() == W.payload(1, n, 1), key
    assert sorted(os.listdir(view.path(ARRAY) / "c/0")) == ["0", "1", "2"]
    assert not (root / ARRAY / "c/0/0").exists(), "committed before the delay"
    before = W.stats(view)
    view.stop()  # unmount: the daemon commits what is pending before it exits
    assert wait_until(lambda: not any(pid_alive(p) for p in view.pids), 30)
    got = stored_chunks(root / ARRAY)
    assert got == {key: W.payload(1, n, 1) for n, key in enumerate(partial)}
    assert before["set"] == 0


def test_sigterm_commits_pending_chunks(mounter, tmp_path):
    root = source(tmp_path)
    view = mounter(root, "--write-back-delay", "3600", foreground=True)
    write_chunks(view.path(ARRAY), KEYS[:5], seq=2)
    assert not (root / ARRAY / "c/0/0").exists()
    view.proc.send_signal(signal.SIGTERM)
    view.proc.wait(timeout=30)
    assert view.proc.returncode == 0, view.log_tail(20)
    got = stored_chunks(root / ARRAY)
    assert got == {key: W.payload(1, n, 2) for n, key in enumerate(KEYS[:5])}
    assert W.shard_problems(root / ARRAY) == []


def test_a_complete_shard_is_committed_at_once_in_one_write(mounter, tmp_path):
    root = source(tmp_path)
    view = mounter(root, "--write-back-delay", "3600")
    before = W.stats(view)
    shard00 = ["c/0/0", "c/0/1", "c/1/0", "c/1/1"]  # every chunk of shard c/0/0
    write_chunks(view.path(ARRAY), shard00, seq=3)
    assert wait_until(lambda: (root / ARRAY / "c/0/0").exists(), 10), "complete shard not committed"
    assert wait_until(lambda: W.delta(before, W.stats(view))["set"] == 1, 10)
    assert stored_chunks(root / ARRAY) == {key: W.payload(1, n, 3) for n, key in enumerate(shard00)}


def test_fsync_commits_everything_pending(mounter, tmp_path):
    root = source(tmp_path)
    view = mounter(root, "--write-back-delay", "3600")
    write_chunks(view.path(ARRAY), ["c/3/3"], seq=4)
    fd = os.open(view.path(ARRAY) / "c/3/3", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    assert stored_chunks(root / ARRAY) == {"c/3/3": W.payload(1, 0, 4)}


def test_write_back_copy_writes_each_shard_once(mounter, tmp_path):
    root = source(tmp_path)
    view = mounter(root, "--write-back-delay", "3600")
    copy = tmp_path / "copy"
    copy.mkdir()
    for n, key in enumerate(KEYS):
        (copy / key).parent.mkdir(parents=True, exist_ok=True)
        (copy / key).write_bytes(W.payload(2, n, 5))
    before = W.stats(view)
    subprocess.run(["cp", "-r", f"{copy}/.", str(view.path(ARRAY))], check=True)
    # `set` counts a write when it starts; `commits` when its shard is in place.
    assert wait_until(lambda: W.delta(before, W.stats(view))["shard_commits"] >= 4, 10)
    d = W.delta(before, W.stats(view))
    assert d["set"] == 4, f"expected one write per shard (4 shards), got {d['set']}"
    stored_size = sum(p.stat().st_size for p in (root / ARRAY / "c").rglob("*") if p.is_file())
    assert d["set_bytes"] == stored_size, "write amplification is not 1"
    assert stored_chunks(root / ARRAY) == {key: W.payload(2, n, 5) for n, key in enumerate(KEYS)}
