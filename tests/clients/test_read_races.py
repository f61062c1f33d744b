"""Reads racing writers on one mount never return bytes nobody wrote.

Two threads rewrite the same chunk files (open with O_TRUNC, one write, close), a third deletes
them, and readers read them whole, all through one writable mount with a short metadata TTL.
A native filesystem gives a reader the old bytes, nothing, or the new bytes; so must the mount.

Before the fix the kernel served its own zeros here: it reads a page, takes the daemon's short
answer (the file was just truncated by a writer) as the end of the file, zero-fills the page,
and keeps the zeros when an attribute of the file changed meanwhile; a reader whose file had
grown again by then copied them out (5 to 68 all-zero reads in 8 s of this race, every run).
See `FsConfig::page_cache`.
"""
import errno
import os
import struct
import threading
import time

import numpy as np
import pytest

import shardindex as si
from writing import build, mount_writable, payload_spec

SECONDS = float(os.environ.get("ZARRFS_RACE_SECONDS", "6"))
MAGIC = b"zfsw"


def value(writer: int, key: int, seq: int, size: int) -> bytes:
    """A self-describing value of `size` bytes (>= 16): magic, writer, key, seq, then filler."""
    head = struct.pack("<4sIII", MAGIC, writer, key, seq)
    return head + bytes((seq + i) % 251 + 1 for i in range(size - 16))


def explain(data: bytes, key: int, sizes) -> str | None:
    """None if `data` is something a native filesystem could return; else what it is.

    With one size, that is nothing or one whole value some writer wrote to `key`. With several,
    two writers truncating and writing the same file interleave as they would on any
    filesystem (one truncates, the other writes 40 bytes, the first writes 16 over them: 16 of
    one value and the tail of the other), so a read may mix values position by position; but
    every value has a non-zero filler beyond its 16-byte head, so a zero there, or a head of
    zeros, was written by nobody."""
    if not data:
        return None
    if data[:16] == b"\0" * min(16, len(data)):
        return f"{len(data)} bytes, zeros where a head should be: {data[:24]!r}"
    if len(data) < 16 or data[:4] != MAGIC or len(data) not in sizes:
        return f"foreign ({len(data)} bytes) {data[:24]!r}"
    _, writer, k, seq = struct.unpack("<4sIII", data[:16])
    if len(sizes) == 1:
        return None if k == key and data == value(writer, k, seq, len(data)) else \
            f"torn or foreign ({len(data)} bytes) {data[:24]!r}"
    if 0 in data[16:]:
        return f"zero bytes nobody wrote at {data.index(0, 16)} of {len(data)}: {data!r}"
    return None


def race(root, keys, sizes, seconds):
    """Run the race; return (reads, problems)."""
    stop = time.monotonic() + seconds
    problems, reads, lock = [], [0], threading.Lock()

    def writer(n):
        seq = 0
        while time.monotonic() < stop:
            for i, key in enumerate(keys):
                seq += 1
                data = value(n, i, seq, sizes[seq % len(sizes)])
                try:
                    fd = os.open(root / key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    try:
                        os.write(fd, data)
                    finally:
                        os.close(fd)
                except OSError:
                    pass  # ENOENT: the deleter won the race for the name

    def deleter():
        while time.monotonic() < stop:
            for key in keys:
                try:
                    os.unlink(root / key)
                except FileNotFoundError:
                    pass
                time.sleep(0.002)

    def reader():
        while time.monotonic() < stop:
            for i, key in enumerate(keys):
                try:
                    # One read(2) of more than any value: it sees one version of the file (two
                    # calls may see two, as on any filesystem that is rewritten meanwhile).
                    fd = os.open(root / key, os.O_RDONLY)
                    try:
                        data = os.read(fd, 4096)
                    finally:
                        os.close(fd)
                except OSError:
                    continue  # gone (ENOENT), or removed while open (ESTALE)
                wrong = explain(data, i, sizes)
                with lock:
                    reads[0] += 1
                    if wrong:
                        problems.append(f"{key}: {wrong}")

    threads = [threading.Thread(target=writer, args=(n,)) for n in (1, 2)]
    threads += [threading.Thread(target=deleter)] + [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 60)
    assert not any(t.is_alive() for t in threads), "an operation hung"
    return reads[0], problems


@pytest.mark.parametrize("sizes", [(16,), (16, 40, 24)], ids=["same-size", "sizes-vary"])
def test_reads_racing_rewrites_and_deletes_see_only_written_bytes(mounter, tmp_path, sizes):
    spec = payload_spec("arr", shape=(16, 16), shard=(8, 8))
    build(tmp_path / "src", [spec])
    m = mount_writable(mounter, tmp_path / "src", "--metadata-ttl", "0.2")
    root = m.path("arr")
    keys = [si.chunk_key((0, j), spec.cke) for j in range(2)]
    os.makedirs(root / os.path.dirname(keys[0]), exist_ok=True)
    reads, problems = race(root, keys, sizes, SECONDS)
    print(f"{reads} reads racing 2 writers and a deleter, {len(problems)} wrong")
    assert reads > 1000, f"too few reads to tell: {reads}"
    assert problems == [], f"{len(problems)} of {reads} reads returned bytes nobody wrote: {problems[:5]}"
    assert m.alive()


def test_a_chunk_file_can_be_memory_mapped_on_a_writable_mount(mounter, tmp_path):
    """Files of a writable mount bypass the page cache; shared mappings still work."""
    spec = payload_spec("arr", shape=(8, 8), shard=(8, 8))
    build(tmp_path / "src", [spec])
    m = mount_writable(mounter, tmp_path / "src")
    key = si.chunk_key((0, 1), spec.cke)
    path = m.path(f"arr/{key}")
    os.makedirs(path.parent, exist_ok=True)
    data = bytes(range(16))
    path.write_bytes(data)
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    assert bytes(mapped) == data
    del mapped


def test_a_read_only_mount_of_a_source_rewritten_elsewhere_reads_only_written_bytes(mounter, tmp_path):
    """A read-only mount keeps the kernel's page cache. Its source rewritten by another mount
    (values of varying sizes), readers through it with `--metadata-ttl 0` see old or new
    values, never zeros: a name whose file changed size gets a new inode, so no inode's size
    ever grows under a page being read (before: 145 to 179 of ~350,000 reads had zeros). A read
    of the old inode after its bytes are gone is ESTALE, as for a file removed while open (about
    one read in 5,000 here, where the file is rewritten all the time)."""
    spec = payload_spec("arr", shape=(16, 16), shard=(8, 8))
    build(tmp_path / "src", [spec])
    writer = mount_writable(mounter, tmp_path / "src")
    reader = mounter(tmp_path / "src", "--read-only", "--metadata-ttl", "0")
    keys = [si.chunk_key((0, j), spec.cke) for j in range(2)]
    sizes = (16, 40, 24, 64)
    os.makedirs(writer.path("arr") / os.path.dirname(keys[0]), exist_ok=True)
    for i, key in enumerate(keys):
        (writer.path("arr") / key).write_bytes(value(1, i, 0, 16))
    stop = time.monotonic() + SECONDS
    problems, heads, reads, stale, lock = [], set(), [0], [0], threading.Lock()

    def write():
        seq = 0
        while time.monotonic() < stop:
            for i, key in enumerate(keys):
                seq += 1
                (writer.path("arr") / key).write_bytes(value(1, i, seq, sizes[seq % len(sizes)]))

    def read():
        while time.monotonic() < stop:
            for i, key in enumerate(keys):
                try:
                    fd = os.open(reader.path("arr") / key, os.O_RDONLY)
                    try:
                        data = os.read(fd, 4096)
                    finally:
                        os.close(fd)
                except OSError as e:
                    with lock:
                        if e.errno == errno.ESTALE:
                            stale[0] += 1
                        else:
                            problems.append(f"{key}: {os.strerror(e.errno)}")
                    continue
                wrong = explain(data, i, sizes)
                with lock:
                    reads[0] += 1
                    heads.add(data[:16])
                    if wrong:
                        problems.append(f"{key}: {wrong}")

    threads = [threading.Thread(target=write)] + [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=SECONDS + 60)
    assert not any(t.is_alive() for t in threads), "an operation hung"
    print(f"{reads[0]} reads of a source rewritten elsewhere, {len(heads)} values seen, "
          f"{stale[0]} ESTALE, {len(problems)} wrong")
    assert reads[0] > 1000 and len(heads) > 10, (reads[0], len(heads))
    assert stale[0] < reads[0] / 100, f"{stale[0]} of {reads[0]} reads were ESTALE"
    assert problems == [], f"{len(problems)} of {reads[0]} reads went wrong: {problems[:5]}"
