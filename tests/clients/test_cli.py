"""Assertion 8 and the rest of the command-line interface: remote URLs and missing sources are
refused with a message, `zarrfs unmount` unmounts and ends the daemon, file:// sources,
--foreground (SIGTERM unmounts), --uid/--gid, --read-only."""
import errno
import os
import signal
import subprocess

import pytest

import shardindex as si
from conftest import run_zarrfs
from helpers import READERS, assert_same_array
from mounting import find_daemons, is_fuse_mounted, pid_alive, wait_until

ARRAY = "zp/i16_2d_nested"


def refused_mount(zarrfs_bin, source, tmp_path) -> subprocess.CompletedProcess:
    mnt = tmp_path / "mnt"
    mnt.mkdir(exist_ok=True)
    try:
        res = run_zarrfs(zarrfs_bin, "mount", source, mnt, timeout=30)
    finally:
        if is_fuse_mounted(mnt):
            subprocess.run(["fusermount3", "-u", str(mnt)])
            pytest.fail(f"mount of {source} produced a mount")
        for pid in find_daemons(zarrfs_bin, mnt):
            os.kill(pid, signal.SIGKILL)
    return res


@pytest.mark.parametrize("source", ["s3://bucket/data.zarr", "gs://bucket/x", "http://127.0.0.1:9/x"])
def test_remote_url_is_refused(zarrfs_bin, tmp_path, source):
    """A remote URL exits non-zero promptly with a message, and nothing is mounted."""
    res = refused_mount(zarrfs_bin, source, tmp_path)
    assert res.returncode != 0
    assert (res.stderr + res.stdout).strip(), "no message"


def test_missing_source_is_refused(zarrfs_bin, tmp_path):
    res = refused_mount(zarrfs_bin, tmp_path / "does-not-exist", tmp_path)
    assert res.returncode != 0
    assert (res.stderr + res.stdout).strip(), "no message"


def test_missing_mountpoint_is_refused(zarrfs_bin, tree, tmp_path):
    res = run_zarrfs(zarrfs_bin, "mount", tree.root, tmp_path / "nope", timeout=30)
    assert res.returncode != 0
    assert (res.stderr + res.stdout).strip(), "no message"


def test_mount_exits_only_when_live_and_unmount_unmounts(mounter, tree, zarrfs_bin):
    """`zarrfs mount` returns with the mount live (Mount.start checks at once), `zarrfs
    unmount` removes it and the daemon exits by itself."""
    m = mounter(tree.root)
    assert (m.path("README.txt")).read_bytes() == (tree.root / "README.txt").read_bytes()
    assert m.pids, "no daemon process found for the mount"
    res = run_zarrfs(zarrfs_bin, "unmount", m.mountpoint, timeout=30)
    assert res.returncode == 0, res.stderr
    assert not m.is_mounted()
    assert wait_until(lambda: not any(pid_alive(p) for p in m.pids), 10), "daemon did not exit"


def test_fusermount_unmount_ends_daemon(mounter, tree):
    m = mounter(tree.root)
    assert subprocess.run(["fusermount3", "-u", str(m.mountpoint)]).returncode == 0
    assert wait_until(lambda: not any(pid_alive(p) for p in m.pids), 10), "daemon did not exit"


def test_file_url_source(mounter, tree):
    m = mounter(f"file://{tree.root}")
    got = READERS["zarr-python"](m.path(ARRAY))
    assert_same_array(got, tree.expected(tree.array(ARRAY)), "file:// mount")


def test_foreground_serves_and_sigterm_unmounts(mounter, tree):
    """--foreground stays attached; SIGTERM unmounts cleanly and exits 0."""
    m = mounter(tree.root, foreground=True)
    got = READERS["tensorstore"](m.path(ARRAY))
    assert_same_array(got, tree.expected(tree.array(ARRAY)), "foreground mount")
    m.proc.send_signal(signal.SIGTERM)
    assert m.proc.wait(timeout=15) == 0
    assert not m.is_mounted()


def test_uid_gid_options(mounter, tree):
    m = mounter(tree.root, "--uid", "1234", "--gid", "4321")
    chunk = sorted(si.expected_chunk_files(si.load_layout(tree.root / ARRAY)))[0]
    for rel in ("README.txt", ARRAY, f"{ARRAY}/zarr.json", f"{ARRAY}/{chunk}"):
        st = os.stat(m.path(rel))
        assert (st.st_uid, st.st_gid) == (1234, 4321), rel


def test_read_only_option(mounter, tree):
    m = mounter(tree.root, "--read-only")
    with pytest.raises(OSError) as info:
        open(m.path("zp/new"), "wb")
    assert info.value.errno == errno.EROFS
    assert (m.path("README.txt")).read_bytes() == (tree.root / "README.txt").read_bytes()


def test_log_file_is_written(mounter, tree):
    m = mounter(tree.root)
    m.path(f"{ARRAY}/zarr.json").read_bytes()
    assert m.log_file.exists()


def test_help_lists_commands(zarrfs_bin):
    res = run_zarrfs(zarrfs_bin, "--help")
    assert res.returncode == 0
    for word in ("mount", "unmount", "inspect"):
        assert word in res.stdout
    res = run_zarrfs(zarrfs_bin, "mount", "--help")
    assert res.returncode == 0
    for opt in ("--foreground", "--read-only", "--view", "--allow-other", "--uid", "--gid",
                "--cache-size", "--log-file"):
        assert opt in res.stdout, opt
