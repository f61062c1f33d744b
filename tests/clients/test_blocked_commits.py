"""A commit waiting for a directory lock held by another process never holds up unrelated
requests: with the shard directories of more arrays than the runtime has workers locked from
outside, a chunk written to another array still commits at once; the held writes commit when
the locks go, and nothing is lost."""
import fcntl
import os
import threading
import time

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")


def make_array(root, name):
    arr = zarr.create_array(str(root / name), shape=(8,), chunks=(2,), shards=(4,), dtype="u1",
                            compressors=None, fill_value=0)
    arr[:] = np.arange(8, dtype="u1")


def write_chunk(path, data, results, key):
    try:
        with open(path, "wb") as f:
            f.write(data)
        results[key] = "ok"
    except OSError as e:
        results[key] = f"errno {e.errno}"


def test_a_locked_directory_holds_up_only_its_own_writers(mounter, tmp_path):
    root = tmp_path / "root"
    locked = [f"locked{i}" for i in range((os.cpu_count() or 2) + 1)]
    for name in [*locked, "free"]:
        make_array(root, name)
    view = mounter(root)
    fds = []
    for name in locked:
        fd = os.open(root / name / "c", os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        fds.append(fd)
    results = {}
    held = [threading.Thread(target=write_chunk, args=(view.path(f"{n}/c/1"), b"\x09\x09", results, n))
            for n in locked]
    try:
        for t in held:
            t.start()
        time.sleep(1.0)
        assert not results, f"writes went through a held lock: {results}"
        free = threading.Thread(target=write_chunk, args=(view.path("free/c/1"), b"\x07\x07", results, "free"))
        started = time.monotonic()
        free.start()
        free.join(timeout=10)
        assert results.get("free") == "ok", f"an unrelated write waited for other arrays' locks: {results}"
        assert time.monotonic() - started < 10
    finally:
        for fd in fds:
            os.close(fd)
    for t in held:
        t.join(timeout=30)
    assert all(results.get(n) == "ok" for n in locked), results
    for name, value in [*[(n, 9) for n in locked], ("free", 7)]:
        got = zarr.open_array(str(view.path(name)), mode="r")[:]
        assert got.tolist() == [0, 1, value, value, 4, 5, 6, 7], name
    assert view.alive()
