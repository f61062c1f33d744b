"""Mounts refused before they happen, and sources mounted with a warning (issue 22, items 2, 3).

- A local source and a mountpoint of which one contains the other (or which are one directory)
  are refused, naming both: the daemon would read its own source through its own mount and the
  first `find` would hang in uninterruptible sleep. Through every way of mounting: `zarrfs
  mount` daemonized and in the foreground, and the FUSE mount helper (`mount -t fuse`).
- A symlink in a local source that leads into the mountpoint is not refused at mount; the
  daemon's own requests to its mount are refused (ELOOP) instead, so nothing waits on itself.
- A local source with no Zarr in it or below it is mounted writable with one warning (on
  stderr and in the log), and refused read-only.

Every refusal must come within seconds and leave nothing mounted; a mount that does appear is
aborted through fusectl and detached, so a failing test never leaves a hung mount behind.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mounting import Mount, abort_connection, find_daemons, mount_entry, pid_alive, wait_until

#: A refusal comes before anything is mounted; a hang would take far longer.
REFUSAL_SECONDS = 15

WARNING = "no Zarr hierarchy found at {}: no zarr.json, .zgroup, .zarray or .zmetadata in it or below it"


def fuse_mounts_under(root: Path) -> list[dict]:
    """FUSE entries of /proc/self/mountinfo whose mount point is `root` or below it."""
    root = os.path.realpath(root)
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            point = fields[4].replace("\\040", " ")
            fstype, source = right.split()[:2]
            if fstype.startswith("fuse") and (point == root or point.startswith(root + "/")):
                found.append({"point": point, "dev": fields[2], "source": source})
    return found


def tear_down_mounts(zarrfs_bin, root: Path) -> list[dict]:
    """Abort and detach every FUSE mount under `root` (never waiting on a hung one), end
    their daemons, and return what was found."""
    found = fuse_mounts_under(root)
    for entry in reversed(found):
        abort_connection(entry["dev"])
        subprocess.run(["umount", "-l", entry["point"]], capture_output=True, timeout=20)
    for entry in found:
        for pid in find_daemons(zarrfs_bin, Path(entry["point"])):
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
    return found


def run_refused(zarrfs_bin, argv: list, root: Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a mount command that must be refused promptly; fail (after cleaning up) if it hangs
    or if anything got mounted under `root`."""
    started = time.monotonic()
    try:
        res = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                             timeout=REFUSAL_SECONDS, env=Mount.daemon_env(), cwd=cwd)
    except subprocess.TimeoutExpired:
        tear_down_mounts(zarrfs_bin, root)
        pytest.fail(f"{argv} neither mounted nor refused within {REFUSAL_SECONDS} s")
    mounted = tear_down_mounts(zarrfs_bin, root)
    assert not mounted, f"{argv} mounted {mounted}; stderr: {res.stderr}"
    assert time.monotonic() - started < REFUSAL_SECONDS
    return res


# ---------------------------------------------------------------------------------------------
# item 2: a source that contains the mountpoint, or the other way round


def layout(tmp_path: Path) -> Path:
    """tmp/data (a Zarr group, with mnt/ and sub/mnt/ in it), tmp/link -> data, tmp/outer/data."""
    root = Path(os.path.realpath(tmp_path))
    data = root / "data"
    (data / "mnt").mkdir(parents=True)
    (data / "sub" / "mnt").mkdir(parents=True)
    (data / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    (root / "link").symlink_to(data)
    (root / "outer" / "data").mkdir(parents=True)
    (root / "outer" / "data" / ".zgroup").write_text('{"zarr_format": 2}')
    return root


# (source, mountpoint, extra options, the overlap's words, the source and mountpoint as resolved)
CIRCULAR = {
    "mountpoint below the source": (
        "data", "data/mnt", [], "the mountpoint is inside the source", "data", "data/mnt"),
    "mountpoint is the source": (
        "data", "data", [], "the mountpoint is the source directory itself", "data", "data"),
    "mountpoint is the source, stacked": (
        "data", "data", ["--stack"], "the mountpoint is the source directory itself", "data", "data"),
    "source a symlink to a parent of the mountpoint": (
        "link", "data/sub/mnt", [], "the mountpoint is inside the source", "data", "data/sub/mnt"),
    "source with .. above the mountpoint": (
        "data/sub/..", "data/sub/mnt", [], "the mountpoint is inside the source", "data", "data/sub/mnt"),
    "source inside the mountpoint, stacked": (
        "outer/data", "outer", ["--stack"], "the source is inside the mountpoint", "outer/data", "outer"),
}


@pytest.mark.parametrize("foreground", [False, True], ids=["daemon", "foreground"])
@pytest.mark.parametrize("case", list(CIRCULAR))
def test_a_source_containing_the_mountpoint_is_refused(zarrfs_bin, tmp_path, case, foreground):
    root = layout(tmp_path)
    source, mountpoint, options, overlap, resolved_source, resolved_mountpoint = CIRCULAR[case]
    argv = [zarrfs_bin, "mount", root / source, root / mountpoint, *options,
            "--log-file", root / "zarrfs.log"] + (["--foreground"] if foreground else [])
    res = run_refused(zarrfs_bin, argv, root)
    assert res.returncode != 0, res.stderr
    message = res.stderr.strip()
    assert len(message.splitlines()) == 1, message
    assert message.startswith("zarrfs: cannot mount "), message
    assert overlap in message and "hang" in message, message
    # Both paths named, as resolved.
    assert str(root / resolved_source) in message and str(root / resolved_mountpoint) in message, message
    assert (root / "data" / "zarr.json").exists()


def test_relative_paths_are_compared_resolved(zarrfs_bin, tmp_path):
    root = layout(tmp_path)
    res = run_refused(zarrfs_bin, [zarrfs_bin, "mount", "link", "data/mnt"], root, cwd=root)
    assert res.returncode != 0
    assert f"cannot mount link (that is, {root / 'data'}) on data/mnt (that is, {root / 'data/mnt'})" \
        in res.stderr, res.stderr


def test_find_does_not_hang(zarrfs_bin, tmp_path):
    """The report of issue 22: `zarrfs mount /data /data/mnt` then `find /data/mnt`. The mount is
    refused, so `find` (given a time limit all the same) walks plain directories."""
    root = layout(tmp_path)
    res = run_refused(zarrfs_bin, [zarrfs_bin, "mount", root / "data", root / "data/mnt"], root)
    assert res.returncode != 0 and "the mountpoint is inside the source" in res.stderr, res.stderr
    try:
        found = subprocess.run(["find", str(root / "data/mnt")], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        tear_down_mounts(zarrfs_bin, root)
        pytest.fail("find hung")
    assert found.returncode == 0 and found.stdout.split() == [str(root / "data/mnt")]


def run_or_abort(argv: list, mount: Mount, seconds: float) -> subprocess.CompletedProcess:
    """Run `argv`; if it has not ended within `seconds` (a process waiting on a hung FUSE
    request cannot be killed), abort the mount's connection, which ends the wait, and fail."""
    proc = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        abort_connection(mount.dev)
        proc.kill()
        proc.communicate(timeout=30)
        pytest.fail(f"{argv} hung on the mount (its connection was aborted)")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.mark.parametrize("target", ["mountpoint", "above it"])
def test_a_symlink_in_the_source_into_the_mount_fails_instead_of_hanging(zarrfs_bin, tmp_path, target):
    """A symlink in the source that leads into the mountpoint passes the mount-time check. The
    daemon following it reaches its own mount; those requests are refused (ELOOP), so the
    walk ends with an error on that entry and the mount goes on serving. (Before, every FUSE
    thread ended up waiting on the mount itself, and `find` hung for good.)"""
    root = Path(os.path.realpath(tmp_path))
    source, mnt = root / "src", root / "outer" / "mnt"
    source.mkdir()
    mnt.mkdir(parents=True)
    (source / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    (source / "loop").symlink_to(mnt if target == "mountpoint" else mnt.parent)
    m = Mount(zarrfs_bin, str(source), mnt, [], root / "zarrfs.log")
    m.start()
    try:
        found = run_or_abort(["find", mnt], m, 20)
        # Walked to the end: the Zarr document is listed, the loop is an error, nothing hung.
        assert str(mnt / "zarr.json") in found.stdout.split(), found
        assert found.returncode != 0 and "loop" in found.stderr, found
        assert run_or_abort(["ls", mnt / "loop"], m, 20).returncode != 0
        assert (mnt / "zarr.json").read_text().startswith('{"zarr_format": 3'), "the mount stopped serving"
        assert m.alive()
        assert "the daemon reached its own mount through its source" in m.log_text()
    finally:
        if m.alive():
            m.stop()
        tear_down_mounts(zarrfs_bin, root)


def test_an_unrelated_mountpoint_next_to_the_source_mounts(zarrfs_bin, tmp_path):
    """The check compares path components: /x/data2 is not inside /x/data."""
    root = layout(tmp_path)
    (root / "data2").mkdir()
    m = Mount(zarrfs_bin, str(root / "data"), root / "data2", ["--read-only"], root / "ok.log")
    try:
        m.start()
        assert (m.path("zarr.json")).exists()
    finally:
        m.stop()


def helper_mount(*args) -> list:
    return ["mount", *map(str, args)]


def test_the_mount_helper_refuses_too(zarrfs_bin, tmp_path):
    """`mount -t fuse 'zarrfs#SOURCE' DIR -o OPTIONS` runs `zarrfs SOURCE DIR -o OPTIONS`."""
    root = layout(tmp_path)
    res = run_refused(zarrfs_bin, helper_mount("-t", "fuse", f"{zarrfs_bin}#{root / 'data'}",
                                                root / "data/mnt", "-o", "rw"), root)
    assert res.returncode != 0
    assert f"cannot mount {root / 'data'} on {root / 'data/mnt'}: the mountpoint is inside the source" \
        in res.stderr, res.stderr
    # A fstab line whose source contains its mountpoint.
    fstab = root / "fstab"
    fstab.write_text(f"{zarrfs_bin}#{root / 'outer/data'} {root / 'outer'} fuse ro,nofail 0 0\n")
    res = run_refused(zarrfs_bin, helper_mount("-T", fstab, root / "outer"), root)
    assert res.returncode != 0
    assert "the source is inside the mountpoint" in res.stderr, res.stderr


# ---------------------------------------------------------------------------------------------
# item 3: a local source with no Zarr in it


class NoLogFile(Mount):
    """A foreground mount that logs to stderr (no --log-file)."""

    def command(self, foreground: bool) -> list[str]:
        cmd = super().command(foreground)
        i = cmd.index("--log-file")
        return cmd[:i] + cmd[i + 2:]


def source_without_zarr(tmp_path: Path, kind: str) -> Path:
    src = tmp_path / f"src-{kind}"
    src.mkdir()
    if kind == "text":
        (src / "notes.txt").write_text("not zarr\n")
        (src / "docs").mkdir()
        (src / "docs" / "meta").write_text("a file named meta that is not Zarr v1's\n")
    return src


@pytest.mark.parametrize("kind", ["empty", "text"])
@pytest.mark.parametrize("mode", ["daemon", "foreground", "foreground-stderr-log"])
def test_no_zarr_is_mounted_writable_with_one_warning(mounter, tmp_path, kind, mode):
    import zarr

    src = source_without_zarr(tmp_path, kind)
    warning = WARNING.format(src)
    if mode == "foreground-stderr-log":
        m = mounter(src, foreground=True, cls=NoLogFile)
    else:
        m = mounter(src, foreground=mode == "foreground")
    # One warning on stderr, and (when the log is a file) one in the log.
    stderr = m.stderr_file.read_text()
    assert stderr.count(warning) == 1, stderr
    assert "mounting it writable" in stderr, stderr
    if mode != "foreground-stderr-log":
        log = m.log_file.read_text()
        assert log.count(warning) == 1 and "WARN" in log, log
    # The mount works: a group created through it lands in the source.
    zarr.open_group(str(m.path("made")), mode="w", zarr_format=3)
    zarr.open_group(str(m.path("made")), mode="r")
    assert (src / "made" / "zarr.json").is_file()
    assert m.alive()


def test_zarr_below_the_root_gives_no_warning(mounter, tmp_path):
    """A directory holding hierarchies in subdirectories (/data with a.zarr and b.zarr)."""
    import numpy as np
    import zarr

    src = tmp_path / "collection"
    (src / "notes").mkdir(parents=True)
    (src / "notes" / "readme.txt").write_text("arrays below\n")
    zarr.create_array(str(src / "deeper" / "a.zarr"), shape=(4,), chunks=(2,), dtype="i4")[:] = np.arange(4)
    for options in ([], ["--read-only"]):
        m = mounter(src, *options)
        assert "no Zarr" not in m.log_text(), m.log_text()
        assert (m.path("deeper/a.zarr/zarr.json")).is_file()
        m.stop()
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / ".zgroup").write_text('{"zarr_format": 2}')
    m = mounter(v2, "--read-only")
    assert "no Zarr" not in m.log_text(), m.log_text()


@pytest.mark.parametrize("kind", ["empty", "text"])
@pytest.mark.parametrize("how", ["--read-only", "-o ro", "--view v2", "helper"])
def test_no_zarr_is_refused_read_only(zarrfs_bin, tmp_path, kind, how):
    src = source_without_zarr(tmp_path, kind)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if how == "helper":
        argv = helper_mount("-t", "fuse", f"{zarrfs_bin}#{src}", mnt, "-o", "ro")
    else:
        argv = [zarrfs_bin, "mount", src, mnt, *how.split()]
    res = run_refused(zarrfs_bin, argv, tmp_path)
    assert res.returncode != 0
    assert f"zarrfs: {WARNING.format(src)}; not mounting it read-only" in res.stderr, res.stderr
    assert mount_entry(mnt) is None
    assert wait_until(lambda: not find_daemons(zarrfs_bin, mnt), 5)
