"""A local source on a small filesystem that fills up: a commit that cannot be written fails
with ENOSPC (not EIO), the shard it would have replaced stays intact byte for byte, the log
says why, and once space is freed the same write succeeds (through a new mount: the first one
may go on showing the failed file while the kernel keeps it)."""
import errno
import shutil
import subprocess

import pytest

from helpers import walk_files

PATH = "zp/i16_2d_nested"


@pytest.fixture
def small_fs(tmp_path):
    """A 4 MiB tmpfs, unmounted after the test's mounts."""
    fs = tmp_path / "small"
    fs.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(fs)], check=True)
    yield fs
    subprocess.run(["umount", "-l", str(fs)], check=False)


def fill(path):
    """Write until the filesystem is full."""
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC, e


def test_a_full_disk_fails_the_write_with_enospc_and_keeps_the_shard(small_fs, mounter, tree):
    src = small_fs / "root"
    shutil.copytree(tree.root / PATH, src / PATH)
    shutil.copy(tree.root / "zarr.json", src / "zarr.json")
    view = mounter(src)
    try:
        before = {k: p.read_bytes() for k, p in walk_files(src / PATH).items()}
        chunk = view.path(PATH) / "c" / "0" / "0"  # a hole of the fixture: a new chunk
        assert not chunk.exists()
        new = bytes(range(256)) * 64
        fill(small_fs / "filler")
        with pytest.raises(OSError) as err:
            with open(chunk, "wb") as f:
                f.write(new)
        assert err.value.errno == errno.ENOSPC, err.value
        after = {k: p.read_bytes() for k, p in walk_files(src / PATH).items()}
        assert after == before, "a shard changed though its commit failed"
        assert "No space left on device" in view.log_text(), view.log_text()[-2000:]
        (small_fs / "filler").unlink()
        # The chunk was new and never stored: a mount of the source does not show it, and
        # writing it again there commits. (The first mount may go on showing the failed
        # file while the kernel keeps it; see the README's limits.)
        view.stop()
        again = mounter(src)
        chunk = again.path(PATH) / "c" / "0" / "0"
        assert not chunk.exists()
        with open(chunk, "wb") as f:
            f.write(new)
        assert chunk.read_bytes() == new
    finally:
        view.stop()


def test_an_overwrite_on_a_full_disk_leaves_the_old_chunk(small_fs, mounter, tree):
    """An existing chunk rewritten on a full disk: ENOSPC, and the source still holds the old
    chunk (read through a new mount)."""
    src = small_fs / "root"
    shutil.copytree(tree.root / PATH, src / PATH)
    shutil.copy(tree.root / "zarr.json", src / "zarr.json")
    view = mounter(src)
    try:
        existing = sorted(walk_files(view.path(PATH)))
        rel = next(k for k in existing if k.startswith("c/"))
        chunk = view.path(PATH) / rel
        old = chunk.read_bytes()
        fill(small_fs / "filler")
        with pytest.raises(OSError) as err:
            with open(chunk, "wb") as f:
                f.write(bytes(range(256)) * 64)
        assert err.value.errno == errno.ENOSPC, err.value
        (small_fs / "filler").unlink()
        view.stop()
        again = mounter(src)
        assert (again.path(PATH) / rel).read_bytes() == old
    finally:
        view.stop()
