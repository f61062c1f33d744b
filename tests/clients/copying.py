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


def shard_copy(zarrfs_bin, source, dest, *extra, shape="20,40", env=None):
    """`zarrfs copy --shard SHAPE` (the default shape fits every 2-d chunk shape of the zarr-python
    group of the fixture; copy() passes --unshard, so the argv is built here)."""
    return subprocess.run([str(zarrfs_bin), "copy", str(source), str(dest), "--shard", shape, *extra],
                          capture_output=True, text=True, timeout=300,
                          env={**Mount.daemon_env(), **(env or {})})


def as_values(files: dict[str, bytes]) -> dict:
    """Files with metadata documents as JSON values: a packed document, unpacked again, is
    written pretty-printed whatever the spelling of the source's (tensorstore writes compact
    JSON)."""
    return {rel: json.loads(b) if rel.endswith("zarr.json") else b for rel, b in files.items()}


def same_values(a_root: Path, b_root) -> dict[str, tuple]:
    """zarr-python reads the same values, attributes and fill values from both groups' arrays;
    each array's shards in B."""
    import numpy as np
    import zarr

    a, b = zarr.open_group(str(a_root), mode="r"), zarr.open_group(str(b_root), mode="r")
    out = {}
    for name, arr in a.arrays():
        other = b[name]
        assert np.array_equal(arr[...], other[...], equal_nan=arr.dtype.kind in "fc"), name
        assert other.attrs.asdict() == arr.attrs.asdict(), name
        assert np.array_equal(other.fill_value, arr.fill_value, equal_nan=arr.dtype.kind in "fc"), name
        out[name] = other.shards
    return out
