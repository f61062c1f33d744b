"""Read-only mounts: with --read-only, and by default when the source directory is not
writable (here a read-only bind mount), every mutation a writer would try (chunk file
create/overwrite/truncate/unlink/rename, zarr.json rewrite, mkdir, rmdir, new files and groups,
zarr-python writing) fails with EROFS, the source is not touched, and the request counters show
no store write. --read-only together with --writable is refused."""
import errno
import os
import subprocess

import numpy as np
import pytest

import fixtures as F
from conftest import run_zarrfs
from mounting import is_fuse_mounted, tree_digest
from writing import READ_ONLY_FLAG_SETS, build, stats

ARRAY = "g/arr"
CASES = sorted(READ_ONLY_FLAG_SETS) + ["read-only-source"]


@pytest.fixture
def source(tmp_path):
    root = tmp_path / "src"
    F.write_group(root, "", {})
    F.write_group(root, "g", {})
    build(root, [F.ArraySpec(ARRAY, F.ZARR_PY, (20, 22), "int16", (8, 8), [F.c_bytes()],
                             [F.Level((4, 4))], holes=0.0, empty_shards=[(2, 2)])])
    (root / "notes.txt").write_bytes(b"notes\n")
    return root


@pytest.fixture
def readonly_mount(mounter, source, tmp_path):
    """mount(case) -> (Mount, directory to compare): --read-only, or the default flags on a
    read-only bind mount of the source."""
    binds = []

    def mount(case):
        if case in READ_ONLY_FLAG_SETS:
            return mounter(source, *READ_ONLY_FLAG_SETS[case])
        ro = tmp_path / "ro"
        ro.mkdir()
        if subprocess.run(["mount", "--bind", str(source), str(ro)], capture_output=True).returncode:
            pytest.skip("cannot bind-mount (needs root)")
        binds.append(ro)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True, capture_output=True)
        return mounter(ro)

    yield mount
    for ro in binds:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)


def mutations(mnt):
    a = mnt / ARRAY
    chunk = np.zeros((4, 4), "<i2").tobytes()
    return {
        "create missing chunk": lambda: os.open(a / "c/4/5", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644),
        "open chunk for writing": lambda: os.open(a / "c/0/0", os.O_WRONLY),
        "open chunk with O_TRUNC": lambda: os.open(a / "c/0/0", os.O_WRONLY | os.O_TRUNC),
        "truncate chunk": lambda: os.truncate(a / "c/0/0", 0),
        "unlink chunk": lambda: os.unlink(a / "c/0/1"),
        "rename chunk within array": lambda: os.rename(a / "c/0/1", a / "c/0/2"),
        "write view zarr.json": lambda: (a / "zarr.json").write_bytes((a / "zarr.json").read_bytes()),
        "mkdir in chunk tree": lambda: os.mkdir(a / "c/9"),
        "rmdir chunk dir": lambda: os.rmdir(a / "c/4"),
        "staged temp file": lambda: (a / "c/0/.1.XyZ123").write_bytes(chunk),
        "new file": lambda: (mnt / "new.txt").write_bytes(b"x"),
        "overwrite file": lambda: (mnt / "notes.txt").write_bytes(b"x"),
        "new group dir": lambda: os.mkdir(mnt / "newgroup"),
    }


@pytest.mark.parametrize("case", CASES)
def test_every_mutation_is_erofs(readonly_mount, source, case):
    before = tree_digest(source)
    view = readonly_mount(case)
    wrong = {}
    for name, call in mutations(view.path()).items():
        try:
            fd = call()
            if isinstance(fd, int):
                os.close(fd)
            wrong[name] = "succeeded"
        except OSError as e:
            if e.errno != errno.EROFS:
                wrong[name] = errno.errorcode.get(e.errno, e.errno)
    assert wrong == {}, f"mutations that did not fail with EROFS: {wrong}"
    st = stats(view)
    assert (st["set"], st["erase"]) == (0, 0), f"store writes on a read-only mount: {st}"
    assert view.alive()
    view.stop()
    assert tree_digest(source) == before, "the source changed"


@pytest.mark.parametrize("case", CASES)
def test_zarr_python_write_is_refused(readonly_mount, source, case):
    import zarr
    from zarr.storage import LocalStore

    before = tree_digest(source)
    view = readonly_mount(case)
    arr = zarr.open_array(store=LocalStore(str(view.path(ARRAY))), mode="r+")
    with pytest.raises(OSError) as info:
        arr[0:4, 0:4] = 5
    assert info.value.errno == errno.EROFS
    view.stop()
    assert tree_digest(source) == before, "the source changed"


def test_read_only_and_writable_conflict(zarrfs_bin, source, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    res = run_zarrfs(zarrfs_bin, "mount", source, mnt, "--read-only", "--writable")
    if is_fuse_mounted(mnt):
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
    assert res.returncode != 0 and not is_fuse_mounted(mnt)
    assert "--writable" in res.stderr or "--read-only" in res.stderr
