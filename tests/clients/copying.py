"""Running `zarrfs copy` in tests, and what a copy should hold: what `cp -r` of a read-only mount
of the same source gives."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import Mount, run_zarrfs
from helpers import walk_files


def contents(root: Path) -> dict[str, bytes]:
    return {rel: p.read_bytes() for rel, p in walk_files(root).items()}


def mount_copy(mounter, source, dest: Path) -> dict[str, bytes]:
    """What `cp -r` of a read-only mount of SOURCE gives."""
    m = mounter(source, "--read-only")
    res = subprocess.run(["cp", "-r", str(m.path()), str(dest)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    return contents(dest)


def copy(zarrfs_bin, source, dest, *extra, env: dict | None = None) -> subprocess.CompletedProcess:
    if env is None:
        return run_zarrfs(zarrfs_bin, "copy", source, dest, "--unshard", *extra, timeout=300)
    return subprocess.run([str(zarrfs_bin), "copy", str(source), str(dest), "--unshard", *extra],
                          capture_output=True, text=True, timeout=300,
                          env={**Mount.daemon_env(), **env})


def copy_json(zarrfs_bin, source, dest, *extra, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    """A copy with --json, and its summary (empty when none was printed)."""
    res = copy(zarrfs_bin, source, dest, "--json", *extra, env=env)
    try:
        summary = json.loads(res.stdout)
    except json.JSONDecodeError:
        summary = {}
    return res, summary
