"""zarrfs never touches a filesystem it does not own. A tmpfs holding a file lies beneath the
mountpoint (zarrfs mounted on top with --stack); after every way of unmounting zarrfs, and after
its daemon is killed and the mount is started again, the tmpfs is still mounted with its file.
Mounting onto a live mount point without --stack, unmounting something that is not zarrfs, and
unmounting a busy mount are refused with a message that names the cause and the fix."""
import errno
import json
import os
import signal
import subprocess

import pytest

from conftest import run_zarrfs
from mounting import Mount, mount_entry, pid_alive, wait_until


@pytest.fixture
def tmpfs(tmp_path):
    m = tmp_path / "tm"
    m.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "zarrfs-test-tmpfs", str(m)], check=True)
    (m / "keep.txt").write_text("precious")
    yield m
    for _ in range(5):
        if mount_entry(m) is None:
            break
        subprocess.run(["umount", "-l", str(m)], capture_output=True)


def assert_tmpfs_intact(m) -> None:
    entry = mount_entry(m)
    assert entry is not None and entry["fstype"] == "tmpfs", f"the tmpfs is gone: {entry}"
    assert (m / "keep.txt").read_text() == "precious"


def mount_on(zarrfs_bin, tree, m, tmp_path, *options, foreground=False) -> Mount:
    mount = Mount(zarrfs_bin, str(tree.root), m, list(options), tmp_path / f"zarrfs-{len(os.listdir(tmp_path))}.log")
    mount.start(foreground=foreground)
    assert mount_entry(m)["fstype"].startswith("fuse") and mount_entry(m)["source"].startswith("zarrfs:")
    assert (m / "zarr.json").exists() and not (m / "keep.txt").exists()
    return mount


def daemon_gone(mount: Mount, timeout: float = 15) -> bool:
    if mount.proc is not None:
        return wait_until(lambda: mount.proc.poll() is not None, timeout)
    return wait_until(lambda: not any(pid_alive(p) for p in mount.pids), timeout)


UNMOUNTS = {
    "fusermount3 -u": lambda zarrfs_bin, m: ["fusermount3", "-u", str(m)],
    "umount": lambda zarrfs_bin, m: ["umount", str(m)],
    "zarrfs unmount": lambda zarrfs_bin, m: [str(zarrfs_bin), "unmount", str(m)],
}


@pytest.mark.parametrize("foreground", [False, True], ids=["daemon", "foreground"])
@pytest.mark.parametrize("how", sorted(UNMOUNTS))
def test_unmount_leaves_the_filesystem_beneath(zarrfs_bin, tree, tmpfs, tmp_path, how, foreground):
    mount = mount_on(zarrfs_bin, tree, tmpfs, tmp_path, "--stack", foreground=foreground)
    try:
        res = subprocess.run(UNMOUNTS[how](zarrfs_bin, tmpfs), capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert daemon_gone(mount), "the daemon did not exit after the unmount"
        assert_tmpfs_intact(tmpfs)
    finally:
        mount.stop()
    assert_tmpfs_intact(tmpfs)


def test_sigterm_unmounts_only_its_own_mount(zarrfs_bin, tree, tmpfs, tmp_path):
    mount = mount_on(zarrfs_bin, tree, tmpfs, tmp_path, "--stack")
    try:
        for pid in mount.pids:
            os.kill(pid, signal.SIGTERM)
        assert daemon_gone(mount)
        assert_tmpfs_intact(tmpfs)
        assert "signal received, unmounting" in mount.log_text()
    finally:
        mount.stop()


def test_killed_daemon_then_mounted_again(zarrfs_bin, tree, tmpfs, tmp_path):
    """kill -9 leaves a dead mount ("transport endpoint is not connected"); the same mount
    command cleans it up (with a log line) and mounts; the tmpfs survives all of it."""
    first = mount_on(zarrfs_bin, tree, tmpfs, tmp_path, "--stack")
    for pid in first.pids:
        os.kill(pid, signal.SIGKILL)
    assert daemon_gone(first)
    with pytest.raises(OSError) as dead:
        os.statvfs(tmpfs)
    assert dead.value.errno in (errno.ENOTCONN, errno.ECONNABORTED)
    second = mount_on(zarrfs_bin, tree, tmpfs, tmp_path, "--stack")
    try:
        assert "cleaning up a dead zarrfs mount" in second.log_text()
        res = run_zarrfs(zarrfs_bin, "unmount", tmpfs)
        assert res.returncode == 0, res.stderr
        assert daemon_gone(second)
        assert_tmpfs_intact(tmpfs)
    finally:
        second.stop()
        first.stop()
    assert_tmpfs_intact(tmpfs)


def test_a_live_mount_point_is_refused_without_stack(zarrfs_bin, tree, tmpfs, tmp_path):
    res = run_zarrfs(zarrfs_bin, "mount", tree.root, tmpfs)
    assert res.returncode != 0
    assert "already a mount point" in res.stderr and "tmpfs" in res.stderr and "--stack" in res.stderr, res.stderr
    assert_tmpfs_intact(tmpfs)
    # A second zarrfs mount on a zarrfs mount: refused, with the way out.
    mount = mount_on(zarrfs_bin, tree, tmpfs, tmp_path, "--stack")
    try:
        res = run_zarrfs(zarrfs_bin, "mount", tree.root, tmpfs)
        assert res.returncode != 0
        assert "mount of zarrfs:" in res.stderr and f"zarrfs unmount {tmpfs}" in res.stderr, res.stderr
        assert mount.alive()
    finally:
        mount.stop()
    assert_tmpfs_intact(tmpfs)


def test_zarrfs_unmount_acts_only_on_zarrfs_mounts(zarrfs_bin, tmpfs, tmp_path):
    res = run_zarrfs(zarrfs_bin, "unmount", tmpfs)
    assert res.returncode != 0
    assert "not a zarrfs mount" in res.stderr and "tmpfs" in res.stderr, res.stderr
    assert_tmpfs_intact(tmpfs)
    plain = tmp_path / "plain"
    plain.mkdir()
    res = run_zarrfs(zarrfs_bin, "unmount", plain)
    assert res.returncode != 0 and "is not mounted" in res.stderr, res.stderr
    res = run_zarrfs(zarrfs_bin, "unmount", tmp_path / "missing")
    assert res.returncode != 0 and "is not mounted" in res.stderr, res.stderr


def test_zarrfs_unmount_of_a_busy_mount_says_so(zarrfs_bin, tree, tmp_path):
    m = tmp_path / "busy"
    m.mkdir()
    mount = mount_on(zarrfs_bin, tree, m, tmp_path)
    try:
        with open(m / "zarr.json", "rb"):
            res = run_zarrfs(zarrfs_bin, "unmount", m)
            assert res.returncode != 0 and "is busy" in res.stderr, res.stderr
            assert mount.alive()
        res = run_zarrfs(zarrfs_bin, "unmount", m)
        assert res.returncode == 0, res.stderr
        assert daemon_gone(mount)
    finally:
        mount.stop()


def test_a_mount_made_right_after_an_unmount_stays(zarrfs_bin, tree, tmp_path):
    """`umount m; zarrfs mount src m`, as scripts do: the new mount often gets the old one's
    mount ID and device number back, while the old daemon is still ending. That daemon must
    leave the new mount alone (it used to take it down about one time in three)."""
    m = tmp_path / "again"
    for round_ in range(8):
        first = Mount(zarrfs_bin, str(tree.root), m, [], tmp_path / f"first-{round_}.log").start()
        old = set(first.pids)
        res = subprocess.run(["umount", str(m)], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        second = Mount(zarrfs_bin, str(tree.root), m, [], tmp_path / f"second-{round_}.log").start()
        try:
            assert wait_until(lambda: not any(pid_alive(p) for p in old), 15), "the first daemon did not exit"
            entry = mount_entry(m)
            assert entry is not None and entry["source"].startswith("zarrfs:"), (
                f"round {round_}: the new mount was taken down: {entry}; "
                f"first daemon's log: {first.log_text()[-600:]}")
            assert json.loads((m / "zarr.json").read_text())["zarr_format"] == 3
        finally:
            second.stop()
            first.stop()
