"""Large stored files on a remote source (`--view raw`, read-ahead per handle): the bytes are
right however the file is read, a sequential reader costs one GET per --prefetch-size window,
and a file replaced by another writer while open fails with ESTALE instead of mixing versions.
"""
import errno
import random

import pytest

import seed_remote as SR
from remote import delta, record, remote, remote_view, stats  # noqa: F401

WINDOW = 1 << 20
SIZE = 10 * WINDOW + 12345  # not a whole number of windows


@pytest.fixture(scope="module")
def big(remote, tmp_path_factory):
    """A prefix holding one large object of random bytes, on S3."""
    local = tmp_path_factory.mktemp("big")
    data = random.Random(7).randbytes(SIZE)
    (local / "big.bin").write_bytes(data)
    return remote.seed("s3", local, "raw-big"), data


def test_sequential_read_one_get_per_window(remote_view, big):
    prefix, data = big
    view = remote_view("s3", "--read-only", "--view", "raw", "--prefetch-size", str(WINDOW), prefix=prefix)
    before = stats(view)
    with open(view.path("big.bin"), "rb") as f:
        got = f.read()
    d = delta(before, stats(view))
    record("raw sequential read", size=SIZE, window=WINDOW, requests=d)
    assert got == data
    windows = -(-SIZE // WINDOW)
    assert d["get"] == windows, f"{d['get']} GETs for {windows} windows: {d}"
    assert d["get_bytes"] == SIZE, f"bytes fetched beyond the file or twice: {d}"


def test_random_reads_are_exact(remote_view, big):
    prefix, data = big
    view = remote_view("s3", "--read-only", "--view", "raw", "--prefetch-size", str(WINDOW), prefix=prefix)
    rng = random.Random(11)
    with open(view.path("big.bin"), "rb", buffering=0) as f:
        for _ in range(60):
            offset = rng.randrange(0, SIZE + 100)
            length = rng.choice([1, 4096, 131072, WINDOW + 17])
            f.seek(offset)
            assert f.read(length) == data[offset:offset + length], (offset, length)


def test_replaced_while_open_is_estale(remote_view, remote, tmp_path):
    local = tmp_path / "src"
    local.mkdir()
    old = random.Random(1).randbytes(4 * WINDOW)
    (local / "f.bin").write_bytes(old)
    prefix = remote.seed("s3", local, "raw-replaced")
    view = remote_view("s3", "--read-only", "--view", "raw", "--prefetch-size", str(WINDOW), prefix=prefix)
    with open(view.path("f.bin"), "rb", buffering=0) as f:
        assert f.read(WINDOW // 2 + 1) == old[:WINDOW // 2 + 1]  # past the middle: next window asked
        SR.put_object("s3", SR.join_key(prefix, "f.bin"), bytes(4 * WINDOW))
        with pytest.raises(OSError) as info:
            f.seek(2 * WINDOW)
            f.read(4096)
        assert info.value.errno == errno.ESTALE, info.value
        f.seek(WINDOW // 2 + 1)  # what the first window holds is still served, unmixed
        assert f.read(WINDOW // 4) == old[WINDOW // 2 + 1:WINDOW // 2 + 1 + WINDOW // 4]
