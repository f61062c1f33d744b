"""Full spill directories and process limits (the local-source full disk is test_full_disk.py).

- The spill directory fills up: the daemon runs with TMPDIR on a 1 MiB tmpfs and a 128 KiB
  write buffer, so written files beyond it spill there. A write that cannot spill fails with
  ENOSPC at write(), and so does every close of that file: it is never committed, not even the
  part written before the failure, and its shard stays byte for byte. The log names the spill
  directory. Files that stayed in memory meanwhile commit; once space is freed, the same write
  commits.
- `ulimit -n` runs out: the daemon runs with RLIMIT_NOFILE 64 (soft and hard), and spilled
  files (each holds a descriptor) use up what is left. Operations that cannot get a descriptor
  fail with EMFILE, never EIO, never hang; one warning says which limit ran out; the daemon
  lives on, and once the files are closed everything works again: every acknowledged write is
  in the store, every other chunk is as it was. A daemon without a low limit does not leak
  descriptors over thousands of opens.
- Many handles: 5,000 chunk files open for reading and 2,000 for writing at once (the daemon's
  soft limit 1,024, as systemd gives; it raises it to the hard one). Everything is committed,
  the counters say what is held and hold nothing afterwards, and the daemon's memory stays
  bounded by its options (write buffer, --cache-size), not by what the open files read.

Each daemon gets its limits through `prlimit` (util-linux) and TMPDIR through its environment.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import resource
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import fixtures as F
import shardindex as si
from mounting import Mount
from writing import build, shard_problems, stats


class LimitedMount(Mount):
    """A mount whose daemon starts under `prlimit --nofile=SOFT:HARD`, with extra environment."""

    def __init__(self, *args, nofile=None, env=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.nofile = nofile
        self.extra_env = env or {}

    def command(self, foreground: bool) -> list[str]:
        cmd = super().command(foreground)
        if self.nofile is None:
            return cmd
        soft, hard = self.nofile
        return ["prlimit", f"--nofile={soft}:{hard}", "--", *cmd]

    def daemon_env(self) -> dict:
        return {**Mount.daemon_env(), **self.extra_env}

    @property
    def pid(self) -> int:
        assert len(self.pids) == 1, f"daemons: {self.pids}"
        return self.pids[0]


@pytest.fixture
def limited(mounter):
    """limited(source, *options, nofile=(soft, hard), env={...}) -> a LimitedMount."""
    def mount(source, *options, nofile=None, env=None) -> LimitedMount:
        return mounter(source, *options, cls=LimitedMount, nofile=nofile, env=env)

    return mount


@contextlib.contextmanager
def tmpfs(path, size: str):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def row_array(path: str, rows: int, width: int, rows_per_shard: int) -> F.ArraySpec:
    """uint8 (rows, width), one inner chunk per row (`bytes` only: a chunk file is the row),
    every chunk stored; chunk file of row r: c/r/0."""
    return F.ArraySpec(path, F.TENSORSTORE, (rows, width), "uint8", (rows_per_shard, width),
                       [F.c_bytes()], [F.Level((1, width))], holes=0.0)


def stored_chunks(array_dir) -> dict[str, bytes]:
    return si.expected_chunk_files(si.load_layout(array_dir))


def row_bytes(tag: int, row: int, width: int) -> bytes:
    """Distinct content of one row write."""
    seed = hashlib.sha256(f"{tag}/{row}".encode()).digest()
    return (seed * (width // len(seed) + 1))[:width]


def fill(path) -> None:
    """Write until the filesystem holding `path` is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)


def write_file(path, data: bytes) -> int | None:
    """open(O_TRUNC)/write/close; None if all succeeded, else the errno of the failing call."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    except OSError as e:
        return e.errno
    try:
        os.write(fd, data)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.close(fd)
        return e.errno
    try:
        os.close(fd)
    except OSError as e:
        return e.errno
    return None


def proc_status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def soft_nofile(pid: int) -> int:
    return resource.prlimit(pid, resource.RLIMIT_NOFILE)[0]


NOTHING_HELD = {"open_files": 0, "held_files": 0, "write_buffer_bytes": 0, "spilled_files": 0,
                "read_snapshot_bytes": 0}


def held_nothing(view, timeout: float = 20) -> dict:
    """What the mount holds, once it holds nothing (the kernel releases closed files
    asynchronously) or the time is up."""
    deadline = time.monotonic() + timeout
    while True:
        s = stats(view)
        held = {k: s.get(k) for k in NOTHING_HELD}
        if held == NOTHING_HELD or time.monotonic() > deadline:
            return held
        time.sleep(0.05)

# ---------------------------------------------------------------------------------------------
# 1. the spill directory fills up

W1 = 65536  # a chunk file: one 64 KiB row, so one chunk fills half the write buffer


def test_a_full_spill_directory_fails_the_write_and_commits_nothing(limited, tmp_path):
    root = tmp_path / "src"
    spec = row_array("w", rows=32, width=W1, rows_per_shard=8)
    build(root, [spec])
    array = root / spec.path
    with tmpfs(tmp_path / "spill", "1m") as spill:
        view = limited(root, "--write-buffer-size", "128K", env={"TMPDIR": str(spill)})
        chunk = lambda row: view.path(spec.path) / "c" / str(row) / "0"  # noqa: E731
        expected = stored_chunks(array)

        # Spilling works: six files open at once, four of them beyond the buffer.
        handles = {row: os.open(chunk(row), os.O_WRONLY | os.O_TRUNC) for row in range(6)}
        for row, fd in handles.items():
            assert os.write(fd, row_bytes(1, row, W1)) == W1
        s = stats(view)
        assert s["spilled_files"] >= 4 and s["write_buffer_bytes"] <= 128 << 10, s
        for row, fd in handles.items():
            os.close(fd)
            expected[f"c/{row}/0"] = row_bytes(1, row, W1)
        assert held_nothing(view) == NOTHING_HELD

        # Full: room for half a chunk, so the write that must spill stops half way.
        gap = spill / "gap"
        gap.write_bytes(b"\0" * (W1 // 2))
        fill(spill / "filler")
        gap.unlink()
        shard_before = (array / "c" / "3" / "0").read_bytes()  # rows 24-31
        a = os.open(chunk(8), os.O_WRONLY | os.O_TRUNC)  # in memory (half the buffer)
        b = os.open(chunk(16), os.O_WRONLY | os.O_TRUNC)  # in memory (the other half)
        c = os.open(chunk(24), os.O_WRONLY | os.O_TRUNC)  # must spill
        os.write(a, row_bytes(2, 8, W1))
        os.write(b, row_bytes(2, 16, W1))
        with pytest.raises(OSError) as at_write:
            os.write(c, row_bytes(2, 24, W1))
        assert at_write.value.errno == errno.ENOSPC, at_write.value
        assert stats(view)["spilled_files"] == 1, "the failed write did spill, half way"
        with pytest.raises(OSError) as at_fsync:
            os.fsync(c)
        assert at_fsync.value.errno == errno.ENOSPC, at_fsync.value
        with pytest.raises(OSError) as at_close:
            os.close(c)
        assert at_close.value.errno == errno.ENOSPC, at_close.value
        os.close(a)
        os.close(b)
        expected["c/8/0"] = row_bytes(2, 8, W1)
        expected["c/16/0"] = row_bytes(2, 16, W1)
        assert (array / "c" / "3" / "0").read_bytes() == shard_before, \
            "the shard of the failed file changed"
        assert stored_chunks(array) == expected, "acknowledged writes missing, or a partial one stored"
        assert held_nothing(view) == NOTHING_HELD

        log = view.log_text()
        failed = [line for line in log.splitlines() if "WARN" in line and str(spill) in line]
        assert any("No space left on device" in line and "--write-buffer-size" in line
                   and "c/24/0" in line for line in failed), log[-3000:]
        assert any("not stored, as an earlier write to it failed" in line for line in failed), \
            log[-3000:]

        # Space again: the same write commits.
        (spill / "filler").unlink()
        assert write_file(chunk(24), row_bytes(3, 24, W1)) is None
        expected["c/24/0"] = row_bytes(3, 24, W1)
        assert chunk(24).read_bytes() == row_bytes(3, 24, W1)
        assert stored_chunks(array) == expected
        assert shard_problems(array) == []
        assert view.alive()
        view.stop()


# ---------------------------------------------------------------------------------------------
# 2. `ulimit -n` runs out

W2 = 4096


def test_out_of_descriptors_fails_with_emfile_and_recovers(limited, tmp_path):
    root = tmp_path / "src"
    spec = row_array("d", rows=2000, width=W2, rows_per_shard=20)
    build(root, [spec])
    array = root / spec.path
    original = stored_chunks(array)
    view = limited(root, "--write-buffer-size", "16K", nofile=(64, 64),
                   env={"TMPDIR": str(tmp_path)})
    pid = view.pid
    assert soft_nofile(pid) == 64
    chunk = lambda row: view.path(spec.path) / "c" / str(row) / "0"  # noqa: E731
    baseline = fd_count(pid)

    # 100 files written and held open: beyond 16 KiB each spills, holding a descriptor, until
    # there are none left.
    handles, outcome = {}, {}
    for row in range(100):
        try:
            handles[row] = os.open(chunk(row), os.O_WRONLY | os.O_TRUNC)
        except OSError as e:
            outcome[row] = ("open", e.errno)
            continue
        try:
            os.write(handles[row], row_bytes(1, row, W2))
        except OSError as e:
            outcome[row] = ("write", e.errno)
    failed = dict(outcome)
    assert failed, "the descriptors never ran out"
    assert {e for _, e in failed.values()} == {errno.EMFILE}, failed
    held = fd_count(pid)

    # Out of descriptors, readers of other shards get EMFILE or their exact bytes (the store
    # gives back the shards it keeps open and tries again), never EIO, never a hang.
    def read(row):
        try:
            with open(chunk(row), "rb") as f:
                return f.read() == original[f"c/{row}/0"] or "wrong bytes"
        except OSError as e:
            return e.errno

    with ThreadPoolExecutor(16) as pool:
        reads = list(pool.map(read, range(1000, 1400), timeout=60))
    assert set(reads) <= {True, errno.EMFILE}, {r for r in reads if r is not True}
    refused = reads.count(errno.EMFILE)

    # Closing: a commit that finds no descriptor fails with EMFILE and stores nothing; each
    # close gives a spilled file's descriptor back, so later ones commit.
    acked = set()
    for row, fd in sorted(handles.items(), reverse=True):
        try:
            os.close(fd)
        except OSError as e:
            assert e.errno == errno.EMFILE, (row, e)
            continue
        if row not in failed:
            acked.add(row)
    assert acked, "no close committed"
    assert view.alive()

    # The load is gone: everything works again, reads of every shard (more shards than the
    # limit has descriptors) and writes.
    for row in range(100, 130):
        assert write_file(chunk(row), row_bytes(2, row, W2)) is None, row
    with ThreadPoolExecutor(16) as pool:
        reads = list(pool.map(read, range(130, 2000), timeout=60))
    assert set(reads) == {True}, {r for r in reads if r is not True}
    stored = stored_chunks(array)
    for row in range(130):
        key = f"c/{row}/0"
        tag = 2 if row >= 100 else 1
        if row >= 100 or row in acked:
            assert stored[key] == row_bytes(tag, row, W2), f"acknowledged write of row {row} lost"
        else:
            assert stored[key] in (original[key], row_bytes(1, row, W2)), f"row {row} damaged"
    assert {k: v for k, v in stored.items() if int(k.split("/")[1]) >= 130} == \
        {k: v for k, v in original.items() if int(k.split("/")[1]) >= 130}
    assert shard_problems(array) == []
    assert held_nothing(view) == NOTHING_HELD
    after = fd_count(pid)
    # The shard files the store keeps open: at most a sixteenth of the limit.
    assert after <= baseline + 64 // 16, (baseline, held, after)

    warnings = [line for line in view.log_text().splitlines()
                if "WARN" in line and "out of file descriptors" in line]
    assert len(warnings) == 1, warnings
    assert "may hold 64" in warnings[0] and "EMFILE" in warnings[0], warnings
    print(f"descriptors: {baseline} at start, {held} with the spilled files, {after} after; "
          f"{len(failed)} of 100 writes failed, {refused} of 400 reads meanwhile, "
          f"{len(acked)} of 100 closes committed")


def test_thousands_of_opens_leak_no_descriptors(limited, tmp_path):
    root = tmp_path / "src"
    spec = row_array("d", rows=2000, width=W2, rows_per_shard=20)
    build(root, [spec])
    array = root / spec.path
    expected = stored_chunks(array)
    view = limited(root)
    pid = view.pid
    base = view.path(spec.path)

    def workload(round_):
        for row in range(0, 2000):
            with open(base / "c" / str(row) / "0", "rb") as f:
                assert f.read(100) == expected[f"c/{row}/0"][:100], row
        for row in range(round_ * 200, round_ * 200 + 200):
            assert write_file(base / "c" / str(row) / "0", row_bytes(round_, row, W2)) is None
            expected[f"c/{row}/0"] = row_bytes(round_, row, W2)
        assert len(os.listdir(base / "c")) == 2000
        for row in range(round_ * 200, round_ * 200 + 50):  # a file opened twice, one closing
            fd1 = os.open(base / "c" / str(row) / "0", os.O_RDWR)
            fd2 = os.open(base / "c" / str(row) / "0", os.O_RDONLY)
            os.pwrite(fd1, b"x", 0)
            os.close(fd1)
            assert os.pread(fd2, 1, 0) == b"x"
            os.close(fd2)
            expected[f"c/{row}/0"] = b"x" + expected[f"c/{row}/0"][1:]

    counts = [fd_count(pid)]
    for round_ in range(3):
        workload(round_)
        assert held_nothing(view) == NOTHING_HELD
        counts.append(fd_count(pid))
    assert counts[-1] == counts[1], f"descriptors grow round by round: {counts}"
    assert counts[-1] <= counts[0] + 64, f"more than the cache of open shards: {counts}"
    assert shard_problems(array) == []
    assert stored_chunks(array) == expected
    print(f"descriptors before and after each round of 2,000 reads and 250 writes: {counts}")


# ---------------------------------------------------------------------------------------------
# 3. many open handles

READERS, WRITERS = 5000, 2000
WR, WW = 32768, 4096  # bytes of a chunk read, of a chunk written


def test_thousands_of_open_handles(limited, tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = READERS + WRITERS + 1000
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    with tmpfs(tmp_path / "src", "400m") as root:
        read_spec = row_array("r", rows=READERS, width=WR, rows_per_shard=50)
        write_spec = row_array("w", rows=WRITERS, width=WW, rows_per_shard=10)
        build(root, [read_spec, write_spec])
        read_dir, write_dir = root / read_spec.path, root / write_spec.path
        digests = {k: hashlib.sha256(v).digest() for k, v in stored_chunks(read_dir).items()}
        view = limited(root, "--write-buffer-size", "1M", "--cache-size", "8M",
                       nofile=(1024, want + 8192), env={"TMPDIR": str(tmp_path)})
        pid = view.pid
        assert soft_nofile(pid) == want + 8192, "the daemon did not raise its soft limit"
        os.listdir(view.path(read_spec.path) / "c")
        rss0, fds0 = proc_status(pid, "VmRSS"), fd_count(pid)

        readers, writers = [], []
        try:
            for row in range(READERS):
                fd = os.open(view.path(read_spec.path) / "c" / str(row) / "0", os.O_RDONLY)
                readers.append(fd)
                data = os.read(fd, WR + 1)
                assert hashlib.sha256(data).digest() == digests[f"c/{row}/0"], row
            for row in range(WRITERS):
                fd = os.open(view.path(write_spec.path) / "c" / str(row) / "0",
                             os.O_WRONLY | os.O_TRUNC)
                writers.append(fd)
                assert os.write(fd, row_bytes(7, row, WW)) == WW
            held = stats(view)
            rss1, fds1 = proc_status(pid, "VmRSS"), fd_count(pid)
            assert held["open_files"] == READERS + WRITERS, held
            assert held["held_files"] == WRITERS, held
            assert held["write_buffer_bytes"] <= 1 << 20, held
            assert held["spilled_files"] >= WRITERS - (1 << 20) // WW, held
            assert held["read_snapshot_bytes"] <= 8 << 20, held
            assert fds1 >= fds0 + held["spilled_files"], (fds0, fds1, held)

            # Closed from 16 threads at once (group commits); every close succeeds.
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(os.close, writers, timeout=120))
            writers = []
        finally:
            for fd in readers + writers:
                with contextlib.suppress(OSError):
                    os.close(fd)
        assert held_nothing(view) == NOTHING_HELD
        rss2, fds2 = proc_status(pid, "VmRSS"), fd_count(pid)
        assert fds2 <= fds0 + 64, (fds0, fds1, fds2)
        stored = stored_chunks(write_dir)
        assert stored == {f"c/{row}/0": row_bytes(7, row, WW) for row in range(WRITERS)}
        assert shard_problems(write_dir) == []
        assert {k: hashlib.sha256(v).digest() for k, v in stored_chunks(read_dir).items()} == digests

        # Memory: what the options allow (1 MiB of written data, 8 MiB of chunks held by
        # readers, 8 MiB of caches) and a bounded cost per handle, far below what the open
        # files read (5,000 x 32 KiB = 156 MiB) and wrote (7.8 MiB).
        grown_mib = (rss1 - rss0) / 1024
        print(f"daemon: VmRSS {rss0 // 1024} MiB at start, {rss1 // 1024} MiB with "
              f"{READERS + WRITERS} handles open ({grown_mib:.1f} MiB more), {rss2 // 1024} MiB "
              f"after closing; descriptors {fds0}, {fds1}, {fds2}; {held}")
        assert grown_mib < 64, f"daemon grew {grown_mib:.1f} MiB with the handles open"
        view.stop()
