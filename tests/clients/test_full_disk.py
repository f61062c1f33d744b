"""A local source on a small filesystem that fills up: a commit that cannot be written fails
with ENOSPC (not EIO), the shard it would have replaced stays intact byte for byte, the log
says why, and once space is freed the same write succeeds."""
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
        chunk = view.path(PATH) / "c" / "0" / "0"
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
        # With space again, a write commits (another chunk of the same shard).
        other = view.path(PATH) / "c" / "0" / "1"
        with open(other, "wb") as f:
            f.write(new)
        assert other.read_bytes() == new
    finally:
        view.stop()
