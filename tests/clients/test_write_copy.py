"""Copying an edited unsharded copy back into the view: the view is copied out with `cp -r`,
the copy is edited with zarr-python as a plain unsharded hierarchy (chunks rewritten, added,
and — where the copy-back can delete — removed), then copied back with `cp -r` (overwrite in
place), `rm -r` + `cp -r` of the arrays' chunk trees, or `rsync -r --delete`. The view must
then list exactly the copy's files with the copy's bytes, and after unmount the sharded store
reads (zarr-python, tensorstore) equal to the edited copy, every shard passing the strict
check."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import fixtures as F
from helpers import read_zarr_python, walk_files
from writing import (build, check_sharded_store, mount_writable, stored_meta, temp_files)

ZP, TS = F.ZARR_PY, F.TENSORSTORE

SPECS = [
    F.ArraySpec("g/a_slash", ZP, (40, 36), "int16", (16, 16), [F.c_bytes(), F.c_zstd()],
                [F.Level((4, 4))], empty_shards=[(2, 1)]),
    F.ArraySpec("g/b_v2dot", TS, (30, 30), "uint8", (10, 10), [F.c_bytes()],
                [F.Level((5, 5), "start", False)], cke=F.cke_v2("."), empty_shards=[(2, 2)]),
    F.ArraySpec("g/n_nested_dot", ZP, (16, 20), "int32", (8, 8), [F.c_bytes(), F.c_gzip()],
                [F.Level((4, 4), "end", True), F.Level((2, 2), "start", False)],
                cke=F.cke_default("."), empty_shards=[(1, 2)]),
]
PLAIN = F.ArraySpec("g/plain", ZP, (10, 10), "uint8", (5, 5), [F.c_bytes()],
                    empty_shards=[(1, 1)])


def edit_copy(copy, spec: F.ArraySpec, seed: int, delete: bool) -> None:
    """Edit the copied (unsharded) array with zarr-python: an unaligned region rewritten, a
    missing shard's region started, and with `delete` whole chunks and one whole shard's
    region set to the fill value (zarr-python then deletes those chunk files)."""
    import zarr
    from zarr.storage import LocalStore

    arr = zarr.open_array(store=LocalStore(str(copy / spec.path)), mode="r+")
    assert arr.shards is None, "the copy of the view should be unsharded"
    rng = np.random.default_rng(seed)
    shard, inner = spec.chunks, spec.inner_chunk_shape

    def rand(region):
        return F.random_values(rng, tuple(s.stop - s.start for s in region), spec.dtype)

    cross = tuple(slice(s - i + 1, s + i + 1) for s, i in zip(shard, inner))
    arr[cross] = rand(cross)
    new = tuple(slice(c * s + 1, c * s + 2 * i) for c, s, i in zip(spec.empty_shards[0], shard, inner))
    new = tuple(slice(r.start, min(r.stop, n)) for r, n in zip(new, spec.shape))
    arr[new] = rand(new)
    if delete:
        two = tuple(slice(s, s + 2 * i) if d == 0 else slice(s, s + i)
                    for d, (s, i) in enumerate(zip(shard, inner)))
        arr[two] = spec.fill_value
        first = tuple(slice(0, s) for s in shard)
        arr[first] = spec.fill_value


@pytest.fixture(scope="module")
def rsync():
    path = shutil.which("rsync")
    if path is None:
        subprocess.run(["apt-get", "install", "-y", "-q", "rsync"], capture_output=True, timeout=300)
        path = shutil.which("rsync")
    if path is None:
        pytest.skip("rsync is not installed and could not be installed with apt-get")
    return path


def run(cmd, failures: list | None = None) -> None:
    """Run a command; a failure is asserted, or recorded in `failures` (checked at the end of
    the test, so the checks after it still run)."""
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    message = f"{cmd[0]} exited {res.returncode}: {res.stderr[-1500:]}"
    if failures is None:
        assert res.returncode == 0, message
    elif res.returncode != 0:
        failures.append(message)


def copy_back(mode: str, copy, mnt, rsync_bin=None) -> list:
    """Copy the edited copy back into the view; returns the commands that failed."""
    failures = []
    if mode == "cp":
        run(["cp", "-r", f"{copy}/.", f"{mnt}/"], failures)
    elif mode == "cp-replace":
        for spec in SPECS:
            view_dir = mnt / spec.path
            others = [str(p) for p in view_dir.iterdir() if p.name != "zarr.json"]
            run(["rm", "-r", *others], failures)
            # no file may be left; directories may stay (listed from shard existence), but
            # every directory listed must open
            errors, left = [], []
            for dirpath, _, files in os.walk(view_dir, onerror=errors.append):
                left += [os.path.relpath(os.path.join(dirpath, f), mnt) for f in files]
            if sorted(left) != [f"{spec.path}/zarr.json"]:
                failures.append(f"files left after rm -r in {spec.path}: {sorted(left)[:10]}")
            failures += [f"listed after rm -r but cannot be opened: {e}" for e in errors]
        run(["cp", "-r", f"{copy}/.", f"{mnt}/"], failures)
    else:
        # --checksum: the quick check (size and mtime in seconds) could skip an edited chunk of
        # the same size written within the same second
        run([rsync_bin, "-r", "--checksum", "--delete", f"{copy}/", f"{mnt}/"], failures)
    return failures


@pytest.mark.parametrize("mode", ["cp", "cp-replace", "rsync"])
def test_edited_copy_back_into_view(mounter, tmp_path, request, mode):
    rsync_bin = request.getfixturevalue("rsync") if mode == "rsync" else None
    root = tmp_path / "src"
    F.write_group(root, "", {})
    F.write_group(root, "g", {"copied": True})
    build(root, SPECS + [PLAIN])
    (root / "g" / "notes.txt").write_bytes(b"not zarr\n")
    metas = {spec.path: stored_meta(root / spec.path) for spec in SPECS}

    view = mount_writable(mounter, root)
    copy = tmp_path / "copy"
    run(["cp", "-r", str(view.path()), str(copy)])
    deletes = mode != "cp"  # plain `cp -r` cannot delete
    for n, spec in enumerate(SPECS + [PLAIN]):
        edit_copy(copy, spec, seed=100 + n, delete=deletes)
    (copy / "g" / "notes.txt").write_bytes(b"edited\n")
    (copy / "g" / "new.txt").write_bytes(b"new file\n")
    edited = {spec.path: read_zarr_python(copy / spec.path) for spec in SPECS + [PLAIN]}
    copied = walk_files(copy)

    failures = copy_back(mode, copy, view.path(), rsync_bin)

    shown = walk_files(view.path())
    assert sorted(shown) == sorted(copied), (
        f"view files not in the copy: {sorted(set(shown) - set(copied))[:10]}; "
        f"copy files not in the view: {sorted(set(copied) - set(shown))[:10]}")
    differ = [k for k in sorted(copied) if shown[k].read_bytes() != copied[k].read_bytes()]
    assert differ == [], f"files whose bytes differ between view and copy: {differ[:10]}"
    assert view.alive()
    view.stop()

    for spec in SPECS:
        check_sharded_store(root / spec.path, edited[spec.path], metas[spec.path],
                            f"{mode}: {spec.path}")
    np.testing.assert_array_equal(read_zarr_python(root / PLAIN.path), edited[PLAIN.path])
    assert (root / "g" / "new.txt").read_bytes() == b"new file\n"
    assert (root / "g" / "notes.txt").read_bytes() == b"edited\n"
    assert temp_files(root) == []
    assert failures == [], f"copying back with {mode} failed: {failures}"
