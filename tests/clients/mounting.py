"""Mounting and unmounting the zarrfs binary from tests, and finding its daemon.

A Mount runs `zarrfs mount SOURCE MOUNTPOINT ... --log-file LOG`, daemonized (the command must
exit 0 only once the mount is live) or with --foreground. Teardown never hangs: unmount with
fusermount3, then `umount -l`, then abort the FUSE connection; then end the daemon by its pid.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

FUSECTL = Path("/sys/fs/fuse/connections")


class MountError(Exception):
    """The mount command failed or did not produce a live mount."""


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_entry(path: Path) -> dict | None:
    """The /proc/self/mountinfo entry whose mount point is `path`, if any (the last one)."""
    target = os.path.realpath(path)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if _unescape(fields[4]) == target:
                fstype, source = right.split()[:2]
                found = {"dev": fields[2], "fstype": fstype, "source": source,
                         "options": fields[5]}
    return found


def is_fuse_mounted(path: Path) -> bool:
    entry = mount_entry(path)
    return entry is not None and entry["fstype"].startswith("fuse")


@contextlib.contextmanager
def on_helper_path(zarrfs_bin: Path):
    """`zarrfs` at /usr/local/bin (the mount helper's fixed PATH, where the install script puts
    it) for the time of the block: linked to `zarrfs_bin` and removed after, unless it is there
    already; a test skips when another zarrfs is installed there."""
    import pytest

    installed = Path("/usr/local/bin/zarrfs")
    placed = not installed.exists()
    if placed:
        installed.symlink_to(zarrfs_bin)
    elif installed.resolve() != zarrfs_bin.resolve():
        pytest.skip(f"another zarrfs is installed at {installed}")
    try:
        yield
    finally:
        if placed:
            installed.unlink()


def pid_alive(pid: int) -> bool:
    """True if the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def find_daemons(binary: Path, mountpoint: Path, helper: bool = False) -> list[int]:
    """Pids of zarrfs processes whose command line names this mountpoint: `zarrfs mount ...`,
    or with `helper` also the mount helper's `zarrfs SOURCE DIR -o ...` (mount -t)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if (args and os.path.basename(args[0]) == binary.name and (helper or "mount" in args)
                and str(mountpoint) in args and pid_alive(int(entry.name))):
            pids.append(int(entry.name))
    return pids


def fuse_holders() -> set[int]:
    """Pids of processes holding /dev/fuse open (a FUSE daemon holds its connection's fd)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) == "/dev/fuse":
                    pids.add(int(entry.name))
                    break
            except OSError:
                continue
    return pids


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


class Mount:
    """One zarrfs mount of a test, on its own mountpoint."""

    def __init__(self, binary: Path, source: str, mountpoint: Path, options: list[str],
                 log_file: Path):
        self.binary = Path(binary)
        self.source = source
        self.mountpoint = Path(mountpoint)
        self.options = options
        self.log_file = Path(log_file)
        self.pids: list[int] = []
        self.proc: subprocess.Popen | None = None
        self.stderr_file: Path = self.log_file.with_suffix(".stderr")
        self.dev: str | None = None

    @staticmethod
    def daemon_env() -> dict:
        env = dict(os.environ)
        env["RUST_LOG"] = os.environ.get("ZARRFS_RUST_LOG", "zarrfs=info")
        return env

    def command(self, foreground: bool) -> list[str]:
        cmd = [str(self.binary), "mount", self.source, str(self.mountpoint), *self.options,
               "--log-file", str(self.log_file)]
        return cmd + (["--foreground"] if foreground else [])

    def start(self, foreground: bool = False) -> "Mount":
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        holders = fuse_holders()
        if foreground:
            self._start_foreground()
        else:
            self._start_daemon()
        self.dev = mount_entry(self.mountpoint)["dev"]
        # The daemon is found by its command line, or else as the new holder of /dev/fuse
        # (tests mount one at a time, so the difference is this mount's daemon).
        self.pids = find_daemons(self.binary, self.mountpoint) or sorted(fuse_holders() - holders)
        return self

    def _start_daemon(self) -> None:
        res = subprocess.run(self.command(False), capture_output=True, text=True, timeout=60,
                             env=self.daemon_env())
        self.stderr_file.write_text(res.stdout + res.stderr)
        if res.returncode != 0:
            raise MountError(f"mount exited {res.returncode}: {res.stderr.strip()}")
        if not is_fuse_mounted(self.mountpoint):
            raise MountError("mount exited 0 before the mount was live")

    def _start_foreground(self) -> None:
        err = open(self.stderr_file, "w")
        self.proc = subprocess.Popen(self.command(True), stdout=err, stderr=subprocess.STDOUT,
                                     env=self.daemon_env())
        err.close()
        live = wait_until(lambda: is_fuse_mounted(self.mountpoint) or self.proc.poll() is not None, 30)
        if not live or not is_fuse_mounted(self.mountpoint):
            raise MountError(f"foreground mount not live (exit {self.proc.poll()}): "
                             f"{self.stderr_file.read_text()[-2000:]}")

    # -- state

    def path(self, rel: str = "") -> Path:
        return self.mountpoint / rel if rel else self.mountpoint

    def is_mounted(self) -> bool:
        return is_fuse_mounted(self.mountpoint)

    def alive(self) -> bool:
        """The daemon process still runs and the mount still answers."""
        if self.proc is not None and self.proc.poll() is not None:
            return False
        if self.proc is None and not any(pid_alive(p) for p in self.pids):
            return False
        return self.is_mounted()

    def log_text(self) -> str:
        text = ""
        for f in (self.log_file, self.stderr_file):
            if f.exists():
                text += f.read_text(errors="replace")
        return text

    def log_tail(self, n: int) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    # -- teardown

    def stop(self) -> None:
        """Unmount (fusermount3 -u, umount -l, abort) and make sure the daemon is gone."""
        pids = set(self.pids) | set(find_daemons(self.binary, self.mountpoint))
        if self.is_mounted():
            _run(["fusermount3", "-u", str(self.mountpoint)])
        if self.is_mounted():
            _run(["umount", "-l", str(self.mountpoint)])
        if self.is_mounted():
            abort_connection(self.dev)
            _run(["umount", "-l", str(self.mountpoint)])
        self._end_processes(pids)

    def _end_processes(self, pids: set[int]) -> None:
        if self.proc is not None:
            pids.add(self.proc.pid)
        if not wait_until(lambda: not any(pid_alive(p) for p in pids), 10):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                for pid in pids:
                    if pid_alive(pid):
                        try:
                            os.kill(pid, sig)
                        except ProcessLookupError:
                            pass
                if wait_until(lambda: not any(pid_alive(p) for p in pids), 5):
                    break
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def _run(cmd: list[str]) -> int:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=20).returncode
    except subprocess.TimeoutExpired:
        return -1


def abort_connection(dev: str | None) -> None:
    """Abort a hung FUSE connection through fusectl (dev is 'major:minor' of the mount)."""
    if not dev:
        return
    connection = FUSECTL / dev.split(":")[1]
    if FUSECTL.is_dir() and not connection.exists():
        _run(["mount", "-t", "fusectl", "none", str(FUSECTL)])
    abort = connection / "abort"
    try:
        abort.write_text("1")
    except OSError:
        pass


def tree_digest(root: Path) -> str:
    """A hash of every path, type, size and content under root (symlinks not followed)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        h.update(f"D {rel}\n".encode())
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                h.update(f"L {name} {os.readlink(p)}\n".encode())
            else:
                with open(p, "rb") as f:
                    h.update(f"F {name}\n".encode() + hashlib.sha256(f.read()).digest())
    return h.hexdigest()
