"""A mixed workload of file operations on the chunk files of one sharded array, from several
threads through one or more mounts of one source, recorded for the history checker
(history.py).

Each thread draws its operations from its own seeded generator: whole-file writes (open with
O_TRUNC, one write, close), writes to a temporary name renamed onto the key (zarr-python's
way), deletes, reads and directory listings. Every value written is a 16-byte payload naming
its writer thread, key and sequence number, so every value is unique and a read names the
write it came from. Every operation is timed on one monotonic clock; one that has not returned
long after the run ends is a hang.

Used by the model tests (test_model_concurrency.py) and by scripts/dev/soak.sh.
"""
from __future__ import annotations

import errno as E
import os
import random
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import shardindex as si
from history import ABSENT, EMPTY, PRESENT, STORE, Op
from writing import payload

KINDS = ("write", "rename", "delete", "read", "list")
DEFAULT_WEIGHTS = {"write": 30, "rename": 15, "delete": 10, "read": 35, "list": 10}


@dataclass
class Run:
    ops: list[Op] = field(default_factory=list)
    hung: list[str] = field(default_factory=list)   # threads still in an operation at the end
    longest: float = 0.0                              # the longest operation, seconds
    seconds: float = 0.0

    def counts(self) -> dict:
        out: dict[str, int] = {}
        for o in self.ops:
            name = o.kind if o.errno is None else f"{o.kind} errno {E.errorcode.get(o.errno, o.errno)}"
            out[name] = out.get(name, 0) + 1
        return dict(sorted(out.items()))

    def log(self, path: Path) -> None:
        path.write_text("\n".join(o.line() for o in sorted(self.ops, key=lambda o: o.inv)) + "\n")


def decode(data: bytes, key_index: int):
    """What a read returned, as the checker compares it."""
    if not data:
        return EMPTY
    if len(data) != 16:
        return f"torn ({len(data)} bytes)"
    magic, writer, key, seq = struct.unpack("<4sIII", data)
    return token(writer, seq) if magic == b"zfsw" and key == key_index else f"foreign {data!r}"


def token(writer: int, seq: int) -> str:
    return f"w{writer}.{seq}"


def chunk_dirs(keys: list[str]) -> list[str]:
    return sorted({k.rsplit("/", 1)[0] for k in keys})


class Worker(threading.Thread):
    def __init__(self, number: int, mount: int, root: Path, keys: list[str], seed: int,
                 weights: dict, deadline: float, run: Run, lock: threading.Lock, fsync: bool,
                 seq_base: int = 0):
        super().__init__(daemon=True, name=f"worker-{number}")
        self.number, self.mount, self.root, self.keys = number, mount, root, keys
        self.rng = random.Random(seed * 1000 + number)
        self.kinds = [k for k in KINDS for _ in range(weights.get(k, 0))]
        self.deadline, self.run_, self.lock, self.fsync = deadline, run, lock, fsync
        self.seq = seq_base
        self.current: Op | None = None

    def record(self, op: Op) -> None:
        with self.lock:
            self.run_.ops.append(op)
            self.run_.longest = max(self.run_.longest, op.took)

    def run(self) -> None:
        while time.monotonic() < self.deadline:
            kind = self.rng.choice(self.kinds)
            if kind == "list":
                self.listing(self.rng.choice(chunk_dirs(self.keys)))
            else:
                self.one(kind, self.rng.randrange(len(self.keys)))
        self.current = None

    def write_file(self, path: Path, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def one(self, kind: str, index: int) -> None:
        key = self.keys[index]
        path = self.root / key
        op = Op(self.number, self.mount, kind, key, time.monotonic())
        self.current = op
        try:
            if kind in ("write", "rename"):
                self.seq += 1
                op.value = token(self.number, self.seq)
                data = payload(self.number, index, self.seq)
                if kind == "write":
                    self.write_file(path, data)
                else:
                    temp = path.with_name(f"{path.name}.t{self.number}.partial")
                    step = "write"  # where it failed, for the log
                    try:
                        self.write_file(temp, data)
                        step = "rename"
                        os.rename(temp, path)
                    except OSError:
                        op.note = f"at {step}"
                        try:
                            os.unlink(temp)
                        except OSError:
                            pass
                        raise
            elif kind == "delete":
                os.unlink(path)
            else:
                try:
                    with open(path, "rb") as f:
                        op.value = decode(f.read(), index)
                except FileNotFoundError:
                    op.value = ABSENT
            op.resp = time.monotonic()
        except OSError as e:
            op.errno = e.errno
            if kind == "delete" and e.errno == E.ENOENT:
                op.resp = time.monotonic()
        op.took = time.monotonic() - op.inv
        self.record(op)

    def listing(self, directory: str) -> None:
        inv = time.monotonic()
        op = Op(self.number, self.mount, "list", directory, inv)
        self.current = op
        try:
            names = set(os.listdir(self.root / directory))
        except OSError as e:
            op.errno = e.errno
            op.took = time.monotonic() - inv
            self.record(op)
            return
        resp = time.monotonic()
        for key in self.keys:
            parent, name = key.rsplit("/", 1)
            if parent == directory:
                self.record(Op(self.number, self.mount, "list", key, inv, resp,
                               PRESENT if name in names else ABSENT, took=resp - inv))


def run_workload(roots: list[Path], keys: list[str], threads: int, seconds: float, seed: int,
                 weights: dict | None = None, fsync: bool = False, grace: float = 90.0,
                 seq_base: int = 0) -> Run:
    """`threads` workers spread over the mounts' array directories `roots` for `seconds`.
    A worker still in an operation `grace` seconds after the end is reported as hung.
    Sequence numbers start after `seq_base` (a later run on the same files writes new values)."""
    run, lock = Run(), threading.Lock()
    start = time.monotonic()
    deadline = start + seconds
    workers = [Worker(n, n % len(roots), roots[n % len(roots)], keys, seed, weights or DEFAULT_WEIGHTS,
                      deadline, run, lock, fsync, seq_base) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=max(0.0, deadline + grace - time.monotonic()))
    run.hung = [f"{w.name}: {w.current.line() if w.current else '?'}" for w in workers if w.is_alive()]
    run.seconds = time.monotonic() - start
    return run


def final_reads(run: Run, roots: list[Path], keys: list[str]) -> None:
    """Every key read once more through every mount, after the run (recorded as reads)."""
    for m, root in enumerate(roots):
        for index, key in enumerate(keys):
            op = Op(100 + m, m, "read", key, time.monotonic())
            try:
                op.value = decode((root / key).read_bytes(), index)
            except FileNotFoundError:
                op.value = ABSENT
            except OSError as e:
                op.errno = e.errno
            op.resp = time.monotonic()
            run.ops.append(op)


def settled_state(run: Run, keys: list[str]) -> dict:
    """What each key held at the end of a run, from its last read (of the STORE observer):
    the initial state of the next run on the same files."""
    state = {}
    for o in run.ops:
        if o.mount == STORE and o.kind == "read" and o.errno is None:
            state[o.key] = o.value
    return {k: state.get(k, ABSENT) for k in keys}


def store_reads(run: Run, array_dir: Path, keys: list[str]) -> list[str]:
    """The source's shards parsed independently, recorded as reads of the STORE observer;
    returns the problems of parsing them (a torn or unparseable shard)."""
    at = time.monotonic()
    try:
        chunks = si.expected_chunk_files(si.load_layout(array_dir))
    except Exception as e:  # noqa: BLE001 - any failure to parse is the finding
        return [f"the source does not parse: {type(e).__name__}: {e}"]
    for index, key in enumerate(keys):
        value = decode(chunks[key], index) if key in chunks else ABSENT
        run.ops.append(Op(200, STORE, "read", key, at, at, value))
    return []


def make_chunk_dirs(roots: list[Path], keys: list[str]) -> None:
    for root in roots:
        for d in chunk_dirs(keys):
            (root / d).mkdir(parents=True, exist_ok=True)


def bad_errnos(run: Run, allowed: set[int]) -> list[Op]:
    """Operations that failed with an errno the run did not allow (ENOENT of a delete is the
    model's "nothing there" and always allowed)."""
    return [o for o in run.ops if o.errno is not None and o.errno not in allowed
            and not (o.kind == "delete" and o.errno == E.ENOENT)]
