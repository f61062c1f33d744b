"""Running under systemd: the install script puts the binary and the template unit in place
(the unit passes `systemd-analyze verify`); a foreground mount tells the service manager
READY=1 only once the mount is live and STOPPING=1 when SIGTERM ends it, after which pending
write-back is committed. systemd is not PID 1 here, so the test listens on NOTIFY_SOCKET
itself, as systemd would."""
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers import assert_same_array
from mounting import Mount, mount_entry

REPO = Path(__file__).resolve().parents[2]


def test_install_script_and_unit(zarrfs_bin, tmp_path):
    prefix, units = tmp_path / "prefix", tmp_path / "units"
    res = subprocess.run(["bash", str(REPO / "scripts" / "install.sh"), "--prefix", str(prefix),
                          "--binary", str(zarrfs_bin), "--systemd", "--systemd-dir", str(units)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    installed = prefix / "bin" / "zarrfs"
    version = subprocess.run([str(installed), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("zarrfs ")
    unit = (units / "zarrfs@.service").read_text()
    assert f"ExecStart={installed} mount --foreground" in unit
    assert "Type=notify" in unit and "/usr/local/bin" not in unit
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing (package systemd)"
    check = subprocess.run([analyze, "verify", str(units / "zarrfs@.service")], capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout + check.stderr == "", check.stdout + check.stderr


def receive(sock: socket.socket, timeout: float) -> str:
    sock.settimeout(timeout)
    return sock.recv(4096).decode()


def test_ready_when_live_and_stopping_with_a_flush(zarrfs_bin, tree, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(tree.root, root)
    entry = next(a for a in tree.arrays("sharded") if a["path"].startswith("zp/"))
    path = entry["path"]
    notify_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify_path))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = {**Mount.daemon_env(), "NOTIFY_SOCKET": str(notify_path)}
    log = tmp_path / "zarrfs.log"
    proc = subprocess.Popen([str(zarrfs_bin), "mount", str(root), str(mnt), "--foreground",
                             "--write-back-delay", "3600", "--log-file", str(log)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        ready = receive(sock, 30)
        # Told only once the mount answers.
        live = mount_entry(mnt)
        assert live is not None and live["source"] == f"zarrfs:{root}", live
        assert "READY=1" in ready.split("\n"), ready
        assert f"STATUS=mounted at {mnt}" in ready

        import zarr

        arr = zarr.open_array(str(mnt / path), mode="r+")
        expected = tree.expected(entry).copy()
        region = tuple(slice(0, min(n, c)) for n, c in zip(arr.shape, arr.chunks))
        values = np.ones(expected[region].shape, dtype=expected.dtype)
        arr[region] = values
        expected[region] = values

        proc.send_signal(signal.SIGTERM)
        stopping = receive(sock, 30)
        assert "STOPPING=1" in stopping.split("\n"), stopping
        assert proc.wait(timeout=60) == 0, proc.stderr.read().decode()
        assert mount_entry(mnt) is None
        # The write-back delay had not passed: SIGTERM committed the pending chunks.
        assert_same_array(zarr.open_array(str(root / path), mode="r")[...], expected, "after SIGTERM")
    finally:
        sock.close()
        if proc.poll() is None:
            proc.kill()
        if mount_entry(mnt) is not None:
            subprocess.run(["umount", "-l", str(mnt)])

