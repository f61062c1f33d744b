"""Small helpers shared by the client tests: reading arrays with the real clients, comparing
arrays and trees, and running a risky file operation in a child process with a time limit."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np


def read_zarr_python(directory: Path) -> np.ndarray:
    import zarr
    from zarr.storage import LocalStore

    store = LocalStore(str(directory), read_only=True)
    return zarr.open_array(store=store, mode="r")[...]


def read_tensorstore(directory: Path) -> np.ndarray:
    import tensorstore as ts

    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(directory) + "/"}}
    return ts.open(spec, open=True, read=True).result().read().result()


READERS = {"zarr-python": read_zarr_python, "tensorstore": read_tensorstore}


def assert_same_array(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    """Equal shape, dtype and values (NaN equal to NaN for float and complex types)."""
    got = np.asarray(got)
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != {expected.dtype}"
    nan = expected.dtype.kind in "fc"
    if not np.array_equal(got, expected, equal_nan=nan):
        diff = np.argwhere(~((got == expected) | (nan & np.isnan(got) & np.isnan(expected))))
        raise AssertionError(f"{what}: {len(diff)} elements differ, first at {diff[:5].tolist()}")


def walk_files(root: Path) -> dict[str, Path]:
    """Relative path -> path of every regular file (and symlink) under root."""
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = p
    return out


def walk_dirs(root: Path) -> set[str]:
    return {str(Path(d).relative_to(root)) for d, _, _ in os.walk(root)} - {"."}


def is_inside(rel: str, directories: list[str]) -> bool:
    return any(rel == d or rel.startswith(d + "/") for d in directories)


def file_refaults() -> int:
    """File pages the kernel evicted and read back since boot. Some VMs reclaim page cache on
    their own (DAMON's proactive pageout), so a page the kernel was left to keep, a file's or
    a directory listing's, may be gone a second later: each comes back as a refault."""
    with open("/proc/vmstat") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("workingset_refault_file "))


def load_json(path: Path) -> dict:
    return json.loads(Path(path).read_bytes())


PROBE = r"""
import errno, os, sys, json
path, size, offset = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.pread(fd, size, offset)
    finally:
        os.close(fd)
    print(json.dumps({"ok": data.hex()}))
except OSError as e:
    print(json.dumps({"errno": e.errno, "error": str(e)}))
"""


def pread_in_child(path: Path, size: int, offset: int, timeout: float = 30) -> dict:
    """os.pread in a child process with a time limit. Returns {"ok": bytes} or {"errno": n},
    or {"timeout": True} if the read did not return in time (the child is killed)."""
    try:
        res = subprocess.run([sys.executable, "-c", PROBE, str(path), str(size), str(offset)],
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timeout": True}
    out = json.loads(res.stdout)
    if "ok" in out:
        out["ok"] = bytes.fromhex(out["ok"])
    return out


def read_file_errno(path: Path) -> tuple[bytes | None, int | None]:
    """(content, None) if the whole file reads, else (None, errno) of the failing call."""
    try:
        with open(path, "rb") as f:
            return f.read(), None
    except OSError as e:
        return None, e.errno

from mount_stats import mount_stats  # noqa: E402,F401  (scripts/, on sys.path: conftest)
