"""Crash loops: kill -9 of the daemon at a random moment of a write workload, then strict checks
of what the store holds, then a remount that must sweep what the crash left and show exactly
the store. Used by tests/clients/test_write_crash.py (CI-sized) and scripts/dev/crash_loop.py (the
long campaigns).

Modes:
- "default": close() commits (on an S3 source `--no-journal`, as the write journal is the
  default of remote sources there; a local source needs no flag);
- "writeback": `--write-back-delay`, the delay drawn from 0.05, 0.5 and 30 s (`--no-journal`
  on S3 too: closed files wait in memory only);
- "journal": `--journal-dir` (one directory per loop, under the workdir, the same for every
  round, so that the remount after a kill finds what the killed daemon left) and a
  `--write-back-delay` drawn from the default (1 s: no flag), 0.05, 0.5 and 30 s. A close
  returns once its file is fsynced in the journal; write-back commits later.

Layouts (`LAYOUTS`): "sharded", a 16x16 uint8 array of 4 shards of 4x4 inner chunks (16 bytes
each), or "unsharded", the same 16 chunks each stored as it is (a file of a local source, an
object of S3: committed one by one at close, or held in the journal as chunks are). The checks
below say "shard" for the stored files of either.

One round:
1. mount the source in the foreground (options of the mode), a writer process starts
   N threads, each rewriting its own chunk files over and over (open O_TRUNC, one 16-byte
   write, close; each key once in turn or twice in a row) with self-describing payloads
   (writer, key index, sequence number per key; see writing.payload). It prints `ack KEY SEQ`
   when close() returned; in write-back mode it fsyncs every 3rd (or 10th) write of a thread
   before closing it, in journal mode never (or every 10th), and prints `sync KEY SEQ` for
   those once fsync() and close() returned.
2. while it writes, a poller reads the store again and again (the files of a local source, the
   objects of an S3 prefix): every state the store passes through is one a crash could leave,
   so each must pass the checks of step 5 that apply (no torn shard or chunk, no write missing
   that was acknowledged (default mode), or fsynced (write-back and journal), before the read
   began).
3. after a seeded random number of acknowledgements plus a seeded random delay (0-20 ms),
   every daemon pid gets SIGKILL. The writer's threads then fail (ECONNABORTED/ENOTCONN):
   `error KEY SEQ ERRNO` names the write each thread had in flight. Any other error, or one
   before the kill, is a failure.
4. the dead mount is cleaned up (fusermount3 -u / umount -l / abort), and the store is read:
   the files of a local source, the objects of an S3 prefix downloaded through the server.
5. checks (each failure is a line of `RoundResult.failures`):
   - every shard parses strictly (writing.shard_problems: index decodes, crc32c, no entry
     past the end or overlapping, no stray file) and every stored chunk is a whole payload
     (an empty or cut chunk is torn too: no reader can decode it);
   - every stored chunk is a payload of the right key and thread (never invented or
     misplaced), with a sequence number that was actually written (the previous round's value,
     or one of this round's from base+1 up to the one in flight);
   - default mode: every key holds its last acknowledged seq, or the one in flight after it;
   - write-back mode: every key holds at least its last fsync-acknowledged seq (closes without
     fsync may be lost: counted as `unsynced_lost`, not a failure);
   - journal mode, as write-back mode here: every key holds at least its last fsynced seq;
     the acknowledged writes not in the store yet are counted as `pending` (the journal holds
     them: the remount must commit them).
6. remount (the mode's journal flags only: `--no-journal` on S3 in the other modes,
   `--journal-dir` in journal mode). Journal mode first: the mount is live once the journal was
   replayed, so the store is read again and must pass the default mode's checks of step 5 (every
   write whose close() returned is in the store, or the one in flight after it; no torn shard, no
   value never written), and when the kill left acknowledged writes out of the store (`pending`),
   the remount's log must say `journal DIR: committed what an earlier mount left files=N
   already_stored=K` with N + K at least that many (K: a commit sent just before the kill may
   land after it, when a delaying proxy holds the request). The view is then compared with the store as replayed. Then, in every mode,
   the sweep: a local source's leftovers are `.zarrfs-tmp.*` files (a shard's new value written to
   a temporary file, killed before the rename). The daemon removes such files of dead processes
   that are older than a minute, the first time it writes into their directory after it starts
   (src/store/sweep.rs; never at mount time, and never young files, as a reused pid could
   otherwise lose a live writer's file). The round ages the leftovers by two minutes (as if the
   remount came later), mounts, checks that the view shows exactly the store and no temporary
   name, rewrites one chunk of every shard (its stored bytes again, or a seq-0 payload where the
   shard is missing), unmounts, and checks that no leftover is left. An S3 source has no temporary
   objects (a shard is replaced by one conditional PUT); its leftovers would be objects other than
   the metadata and shard keys, or unfinished multipart uploads under the prefix: none may exist.
   Journal mode: once the remount has unmounted (and exited 0), the journal directory holds no
   `seg-*.zj` file.

Figures of a round: acks (close acks, including synced ones), synced, in_flight (writes
interrupted by the kill), landed (in-flight writes found committed: the kill came between the
commit and the reply), leftovers (temporary files found: the kill came in the middle of a
commit), swept, unsynced_lost (write-back: closed but not committed), pending (journal:
acknowledged but not committed at the kill; the remount's replay must commit them), replayed
(journal: files the remount's replay committed, from its log line), polls, seconds.
"""
from __future__ import annotations

import errno
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path

import fixtures as F
import shardindex as si
from helpers import walk_files
from mounting import Mount, find_daemons, pid_alive, wait_until
from writing import MAGIC, PAYLOAD, build, payload, payload_spec, shard_problems, view_matches_store

ARRAY = "crash/arr"
TEMP_MARKER = ".zarrfs-tmp."
# Write-back rounds fsync every 3rd write of a thread, or every 10th (drawn per round): with
# fewer fsyncs, pending files wait longer, and more of what write-back does shows in the store.
SYNC_EVERY = (3, 10)
# Journal rounds fsync never (0: what is not committed when the daemon dies is only in the
# journal), or every 10th write (an fsync commits everything: the journal empties while
# closes keep appending to it).
JOURNAL_SYNC_EVERY = (0, 10)
# Journal rounds' --write-back-delay: None is no flag (the daemon's default with a journal, 1 s).
JOURNAL_DELAYS = (None, 0.05, 0.5, 30.0)
# The line of a daemon log saying what its mount committed from the journal before serving
# (src/app.rs, replay_journal).
REPLAY_LINE = re.compile(r"committed what an earlier mount left\b.*?\bfiles=(\d+).*?\balready_stored=(\d+)")
# Each key written once in turn, or twice in a row (drawn per round): a rewrite right after a
# close races the kernel's (asynchronous) release of the closed handle.
REPEATS = (1, 2)
# What a write gets once the daemon is gone: the request in flight is aborted, later ones find
# no connection. Any other error is a failure of the daemon before it died.
DEAD_MOUNT_ERRNOS = {errno.ECONNABORTED, errno.ENOTCONN}
THREADS = 4
# The test array: 16x16 uint8, 8x8 shards of 4x4 inner chunks (16 bytes each): 4 shards, 16 keys.
SHAPE, SHARD = (16, 16), (8, 8)
# "sharded": the array above; "unsharded": the same 16 chunks of 4x4, each stored as it is (a
# file of a local source, an object of S3): what the journal holds for files stored as they are.
LAYOUTS = ("sharded", "unsharded")


def array_spec(layout: str) -> F.ArraySpec:
    """The test array in `layout`."""
    assert layout in LAYOUTS, layout
    if layout == "sharded":
        return payload_spec(ARRAY, shape=SHAPE, shard=SHARD)
    return F.ArraySpec(ARRAY, F.ZARR_PY, SHAPE, "uint8", (4, 4), [F.c_bytes()], [],
                       cke=F.cke_default("/"), write=False)


def stored_keys(layout: str) -> set:
    """The keys (relative to the array) that may hold the array's stored chunks or shards."""
    grid = SHARD if layout == "sharded" else (4, 4)
    cke = {"name": "default", "configuration": {"separator": "/"}}
    return {si.chunk_key(c, cke) for c in product(*(range(s // g) for s, g in zip(SHAPE, grid)))}


def stored_problems(array_dir: Path, allow_temp: bool = False) -> list[str]:
    """Every problem of the array's stored form: a sharded one's shards checked strictly
    (writing.shard_problems); for either, a file that is neither zarr.json nor a stored key of
    the grid (with allow_temp, zarrfs's own temporary files are allowed). An unsharded chunk
    that is no whole payload is found by store_state."""
    layout = si.load_layout(array_dir)
    if layout.sharded:
        return shard_problems(array_dir, allow_temp=allow_temp)
    keys = stored_keys("unsharded")
    return [f"stray file {rel} in the array directory" for rel in walk_files(array_dir)
            if rel != "zarr.json" and rel not in keys
            and not (allow_temp and TEMP_MARKER in os.path.basename(rel))]

WRITER = r"""
import os, struct, sys, threading
mnt, base, threads, sync_every, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
keys = sys.argv[6:]
lock = threading.Lock()

def say(*words):
    with lock:
        print(*words, flush=True)

def run(t):
    mine = [(n, k) for n, k in enumerate(keys) if n % threads == t]
    seqs = {k: base for _, k in mine}
    count = 0
    while True:
        for index, key in mine:
            for _ in range(repeat):
                seqs[key] += 1
                seq = seqs[key]
                count += 1
                sync = sync_every > 0 and count % sync_every == 0
                data = struct.pack("<4sIII", b"zfsw", t, index, seq)
                try:
                    fd = os.open(os.path.join(mnt, key), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    try:
                        if os.write(fd, data) != len(data):
                            raise OSError(5, "short write")
                        if sync:
                            os.fsync(fd)
                    finally:
                        os.close(fd)
                except OSError as e:
                    say("error", key, seq, e.errno)
                    return
                say("sync" if sync else "ack", key, seq)

workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
for w in workers: w.start()
for w in workers: w.join()
"""


# ---------------------------------------------------------------------------------------------
# mounts with their own environment (an S3 source needs the client's variables)


class EnvMount(Mount):
    """A Mount whose daemon gets extra environment variables."""

    def __init__(self, *args, env: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.extra_env = dict(env or {})

    def daemon_env(self) -> dict:  # noqa: D102 - Mount.daemon_env is a staticmethod
        env = Mount.daemon_env()
        env.update(self.extra_env)
        return env


# ---------------------------------------------------------------------------------------------
# sources


class LocalSource:
    """A local directory holding the hierarchy; its store is read in place."""

    kind = "local"
    remote = False
    env: dict = {}
    poll_pause = 0.001

    def __init__(self, root: Path, layout: str = "sharded"):
        self.root = Path(root)
        self.layout = layout
        build(self.root, [array_spec(layout)])

    def mount_source(self) -> str:
        return str(self.root)

    def store(self, label: str) -> Path:
        """The directory holding the store's files (the source itself)."""
        return self.root

    def leftovers(self) -> list[str]:
        """Temporary files of zarrfs under the source (relative paths)."""
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*")
                      if TEMP_MARKER in p.name)

    def age_leftovers(self, seconds: float) -> None:
        """Set the leftovers' times `seconds` back, as if the remount came that much later."""
        then = time.time() - seconds
        for rel in self.leftovers():
            try:
                os.utime(self.root / rel, (then, then))
            except FileNotFoundError:
                pass

    def close(self) -> None:
        pass


class S3Source:
    """A prefix of the moto S3 server (scripts/servers.sh), seeded from a local build; its store
    is read back by downloading every object through the server."""

    kind = "s3"
    remote = True  # the write journal is the default: the other modes say --no-journal
    poll_pause = 0.02

    def __init__(self, workdir: Path, prefix: str, layout: str = "sharded"):
        import seed_remote as SR

        self.SR = SR
        self.workdir = Path(workdir)
        self.prefix = prefix.strip("/")
        self.layout = layout
        self.env = SR.client_env("s3")
        seed = self.workdir / "seed"
        build(seed, [array_spec(layout)])
        SR.upload_tree("s3", seed, self.prefix)
        self.s3 = SR.s3_client()
        self.metadata = set(SR.local_files(seed))  # the documents; every other key is stored data
        self.shard_keys = {f"{ARRAY}/{key}" for key in stored_keys(layout)}

    def mount_source(self) -> str:
        return self.SR.url("s3", self.prefix)

    def _keys(self) -> list[str]:
        base = self.prefix + "/"
        keys = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.SR.BUCKET, Prefix=base):
            keys += [obj["Key"][len(base):] for obj in page.get("Contents", [])]
        return keys

    def store(self, label: str) -> Path:
        """Every object under the prefix downloaded into a fresh directory."""
        dest = self.workdir / f"bucket-{label}"
        shutil.rmtree(dest, ignore_errors=True)
        for rel in self._keys():
            p = dest / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            key = f"{self.prefix}/{rel}"
            p.write_bytes(self.s3.get_object(Bucket=self.SR.BUCKET, Key=key)["Body"].read())
        return dest

    def leftovers(self) -> list[str]:
        """Objects that are neither a document nor a shard key, and unfinished multipart
        uploads under the prefix."""
        stray = [k for k in self._keys() if k not in self.metadata and k not in self.shard_keys]
        uploads = self.s3.list_multipart_uploads(Bucket=self.SR.BUCKET, Prefix=self.prefix + "/")
        return sorted(stray) + [f"multipart upload {u['Key']}" for u in uploads.get("Uploads", [])]

    def age_leftovers(self, seconds: float) -> None:
        pass

    def close(self) -> None:
        try:
            self.SR.delete_prefix("s3", self.prefix)
        except Exception as e:  # noqa: BLE001 - cleanup must not hide results
            print(f"crashing: could not delete s3 prefix {self.prefix}: {e}")


# ---------------------------------------------------------------------------------------------
# results


@dataclass
class RoundResult:
    round: int
    acks: int = 0
    synced: int = 0
    in_flight: int = 0
    landed: int = 0
    leftovers: int = 0
    swept: int = 0
    unsynced_lost: int = 0
    pending: int = 0
    replayed: int = 0
    polls: int = 0
    seconds: float = 0.0
    torn: list = field(default_factory=list)          # shard problems (must stay empty)
    lost_acked: list = field(default_factory=list)    # default and journal modes (must stay empty)
    lost_synced: list = field(default_factory=list)   # write-back and journal modes (must stay empty)
    invented: list = field(default_factory=list)      # values never written (must stay empty)
    other: list = field(default_factory=list)         # workload, view and sweep failures
    log_tail: str = ""

    @property
    def failures(self) -> list[str]:
        return ([f"torn: {p}" for p in self.torn] + [f"lost acknowledged: {p}" for p in self.lost_acked]
                + [f"lost fsynced: {p}" for p in self.lost_synced]
                + [f"invented: {p}" for p in self.invented] + self.other)

    def line(self) -> str:
        text = (f"round {self.round}: acks {self.acks} synced {self.synced} in flight {self.in_flight} "
                f"landed {self.landed} leftovers {self.leftovers} swept {self.swept} "
                f"unsynced lost {self.unsynced_lost} pending {self.pending} replayed {self.replayed} "
                f"polls {self.polls} ({self.seconds:.2f} s)")
        return text + (f" FAILED: {self.failures[:5]}" if self.failures else "")


# ---------------------------------------------------------------------------------------------
# checks (pure: they take the store as read and the writer's record)


def store_state(array_dir: Path) -> tuple[dict, dict]:
    """{key: (writer, key index, seq)} of the stored chunks, and {key: problem} of the stored
    chunks that are no payload (empty, cut short: a chunk no reader can decode)."""
    state, bad = {}, {}
    for key, data in si.expected_chunk_files(si.load_layout(array_dir)).items():
        if len(data) != PAYLOAD.size or data[:4] != MAGIC:
            bad[key] = f"{key}: stored bytes are no payload: {data[:32]!r} ({len(data)} bytes)"
            continue
        state[key] = PAYLOAD.unpack(data)[1:]
    return state, bad


@dataclass
class Record:
    """What the writer of one round reported."""
    keys: list
    base: int
    threads: int
    acked: dict = field(default_factory=dict)     # key -> last acknowledged seq (close returned)
    synced: dict = field(default_factory=dict)    # key -> last fsync-acknowledged seq
    in_flight: dict = field(default_factory=dict)  # key -> seq of the write that failed
    n_acks: int = 0
    n_synced: int = 0


def check_store(array_dir: Path, record: Record, previous: dict, write_back: bool,
                result: RoundResult) -> dict:
    """Fill result's failure lists from the stored array; returns {key: seq} as stored."""
    try:
        result.torn += stored_problems(array_dir, allow_temp=True)
        state, bad = store_state(array_dir)
    except Exception as e:  # noqa: BLE001 - an unreadable store is a finding, not a crash
        result.torn.append(f"the store cannot be read: {type(e).__name__}: {e}")
        return dict(previous)
    result.torn += list(bad.values())
    seqs = {}
    for index, key in enumerate(record.keys):
        if key in bad:  # reported as torn
            continue
        got = state.get(key)
        seq = got[2] if got else None
        seqs[key] = seq
        if got is not None and seq != 0 and got[:2] != (index % record.threads, index):
            result.invented.append(f"{key}: holds writer/index {got[:2]}, want "
                                   f"{(index % record.threads, index)}")
        acked, synced = record.acked.get(key), record.synced.get(key)
        top = (acked + 1) if acked is not None else record.base + 1  # the newest one written
        written = seq == previous.get(key) or (seq is not None and record.base < seq <= top)
        if seq is None and previous.get(key) is not None:
            result.lost_acked.append(f"{key}: held {previous[key]} before the round, now nothing")
        elif not written:
            result.invented.append(f"{key}: stored seq {seq} was never written (previous "
                                   f"{previous.get(key)}, this round {record.base + 1}..{top})")
        if not write_back and acked is not None and seq not in (acked, acked + 1):
            result.lost_acked.append(f"{key}: acknowledged {acked}, stored {seq}")
        if write_back and synced is not None and (seq is None or seq < synced):
            result.lost_synced.append(f"{key}: fsynced {synced}, stored {seq}")
        if acked is not None and (seq is None or seq < acked) and write_back:
            result.unsynced_lost += 1
        if key in record.in_flight and seq == record.in_flight[key]:
            result.landed += 1
    return seqs


# ---------------------------------------------------------------------------------------------
# the loop


class CrashLoop:
    """Rounds of write, kill -9, check, remount-and-sweep on one source.

    binary: the zarrfs binary; workdir: a directory for mountpoints, logs and downloads (and
    the journal); source: LocalSource or S3Source; mode: "default", "writeback" or "journal";
    seed: the random seed of the kill points (and write-back delays); kill_acks: (low, high)
    acknowledgements before the kill; delays: write-back mode's --write-back-delay draws,
    journal_delays journal mode's (None: no flag); sync_every: the writer's fsync draws (0:
    none; default SYNC_EVERY in write-back mode, JOURNAL_SYNC_EVERY in journal mode).
    before_remount, when set, is called with the loop after the checks of the killed store
    and before the remount (the tests lose the journal there)."""

    MODES = ("default", "writeback", "journal")

    def __init__(self, binary: Path, workdir: Path, source, mode: str = "default", seed: int = 0,
                 kill_acks: tuple = (5, 300), threads: int = THREADS, delays=(0.05, 0.5, 30.0),
                 sync_every=None, repeats=REPEATS, journal_delays=JOURNAL_DELAYS):
        assert mode in self.MODES, mode
        self.binary, self.workdir, self.source = Path(binary), Path(workdir), source
        self.mode, self.seed, self.kill_acks, self.threads = mode, seed, kill_acks, threads
        if sync_every is None:
            sync_every = JOURNAL_SYNC_EVERY if mode == "journal" else SYNC_EVERY
        self.delays, self.sync_every, self.repeats = delays, sync_every, repeats
        self.journal_delays = journal_delays
        # One journal for every round of the loop: the remount after a kill finds what the
        # killed daemon left there.
        self.journal_dir = self.workdir / "journal"
        self.before_remount = None
        cke = {"name": "default", "configuration": {"separator": "/"}}
        self.keys = [si.chunk_key((i, j), cke) for i in range(SHAPE[0] // 4) for j in range(SHAPE[1] // 4)]
        self.shard_names = stored_keys(source.layout)
        self.previous: dict = {}
        self.mounts = 0
        self.results: list[RoundResult] = []

    @property
    def write_back(self) -> bool:
        return self.mode == "writeback"

    @property
    def journaled(self) -> bool:
        return self.mode == "journal"

    @property
    def syncs_only(self) -> bool:
        """Whether a write is only sure to be in the store (before a remount) once fsynced."""
        return self.mode in ("writeback", "journal")

    def _journal_flags(self) -> list:
        """The flags every mount of the mode has: its journal, or none (the journal is the
        default of remote sources: without --no-journal, default and write-back modes would
        journal there)."""
        if self.journaled:
            return ["--journal-dir", str(self.journal_dir)]
        return ["--no-journal"] if self.source.remote else []

    def _round_options(self, rng: random.Random) -> list:
        """The killed mount's options (the write-back delay drawn)."""
        if self.journaled:
            delay = rng.choice(self.journal_delays)
            return self._journal_flags() + ([] if delay is None else ["--write-back-delay", str(delay)])
        options = ["--write-back-delay", str(rng.choice(self.delays))] if self.write_back else []
        return options + self._journal_flags()

    def mount(self, *options) -> EnvMount:
        n = self.mounts
        self.mounts += 1
        m = EnvMount(self.binary, self.source.mount_source(), self.workdir / f"mnt{n}", list(options),
                     self.workdir / f"zarrfs{n}.log", env=self.source.env)
        try:
            m.start(foreground=True)
        except Exception:
            m.stop()
            raise
        return m

    # -- one round

    def round(self, n: int) -> RoundResult:
        rng = random.Random(f"{self.seed}/{self.source.kind}/{self.mode}/{n}")
        result = RoundResult(n)
        start = time.monotonic()
        record = Record(self.keys, base=(n + 1) * 1_000_000, threads=self.threads)
        view = self.mount(*self._round_options(rng))
        try:
            self._write_and_kill(view, record, rng, result)
        finally:
            view.stop()
        if view.is_mounted():
            result.other.append("the dead mount could not be cleaned up")
        result.acks, result.synced = record.n_acks, record.n_synced
        result.in_flight = len(record.in_flight)
        store = self.source.store(f"{n}-killed")
        if self.journaled:
            # As write-back mode: only fsynced writes must be in the store yet; what else was
            # acknowledged is pending in the journal.
            killed = RoundResult(n)
            check_store(store / ARRAY, record, self.previous, True, killed)
            _merge_failures(result, killed, "")
            result.pending = killed.unsynced_lost
        else:
            check_store(store / ARRAY, record, self.previous, self.write_back, result)
        if self.before_remount is not None:
            self.before_remount(self)
        found = self.source.leftovers()
        result.leftovers = len(found)
        remount = self._remount_and_sweep(store, found, result, record)
        result.seconds = time.monotonic() - start
        if result.failures:
            result.log_tail = (f"--- killed mount {view.mountpoint.name} ---\n{view.log_tail(30)}\n"
                               f"--- remount {remount.mountpoint.name} ---\n{remount.log_tail(30)}")
        self.results.append(result)
        return result

    def _write_and_kill(self, view: EnvMount, record: Record, rng: random.Random,
                        result: RoundResult) -> None:
        array = view.path(ARRAY)
        for i in range(SHAPE[0] // 4):  # chunk directories are implicit: mkdir makes them appear
            (array / "c" / str(i)).mkdir(parents=True, exist_ok=True)
        kill_after = rng.randint(*self.kill_acks)
        extra = rng.uniform(0, 0.02)
        sync_every = rng.choice(self.sync_every) if self.syncs_only else 0
        repeat = rng.choice(self.repeats)
        child = subprocess.Popen([sys.executable, "-c", WRITER, str(array), str(record.base),
                                  str(self.threads), str(sync_every), str(repeat), *self.keys],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        enough, killed = threading.Event(), threading.Event()
        early: list[str] = []

        def reader():
            for line in child.stdout:
                word, key, seq, *rest = line.split()
                seq = int(seq)
                if word in ("ack", "sync"):
                    record.acked[key] = seq
                    record.n_acks += 1
                    if word == "sync":
                        record.synced[key] = seq
                        record.n_synced += 1
                    if record.n_acks >= kill_after:
                        enough.set()
                elif word == "error":
                    record.in_flight[key] = seq
                    if not killed.is_set() or int(rest[0]) not in DEAD_MOUNT_ERRNOS:
                        early.append(f"{key} seq {seq}: {errno.errorcode.get(int(rest[0]), rest[0])}")
            enough.set()

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        seen: set = set()
        poller = threading.Thread(target=self._poll, args=(record, killed, result, seen), daemon=True)
        poller.start()
        got_going = enough.wait(120)
        time.sleep(extra)
        pids = set(view.pids) | {view.proc.pid} | set(find_daemons(view.binary, view.mountpoint))
        killed.set()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            result.other.append("the writer hung after the daemon was killed")
        thread.join(timeout=10)
        poller.join(timeout=30)
        stderr = child.stderr.read()
        if not got_going:
            result.other.append(f"the writer did not reach {kill_after} acks in 120 s "
                                f"({record.n_acks}): {stderr[-500:]}")
        if early:
            result.other.append(f"writes failed before the kill, or not as on a dead mount: {early[:4]}")
        if not record.in_flight:
            result.other.append(f"the kill interrupted no write ({record.n_acks} acks): {stderr[-500:]}")
        if not wait_until(lambda: not any(pid_alive(p) for p in pids), 20):
            result.other.append(f"a daemon survived SIGKILL: {sorted(pids)}")

    def _poll(self, record: Record, killed: threading.Event, result: RoundResult, seen: set) -> None:
        """While the writer runs, read the store again and again: every state it passes through
        is one a crash could leave, so each must pass the same checks (no torn shard or chunk;
        default mode: no write acknowledged before the read began is missing, write-back and
        journal modes: no write fsynced before it)."""
        while not killed.is_set():
            floor = dict(record.synced if self.syncs_only else record.acked)
            try:
                array_dir = self.source.store("poll") / ARRAY
                # A shard created between the listing of the shards and the walk of the
                # directory is no stray file.
                problems = [p for p in stored_problems(array_dir, allow_temp=True)
                            if not (p.startswith("stray file ") and p.split()[2] in self.shard_names)]
                state, bad = store_state(array_dir)
            except (OSError, ValueError) as e:  # a shard read in the middle of its removal
                problems, state, bad = [f"the store cannot be read: {e}"], {}, {}
            result.polls += 1
            found = problems + list(bad.values())
            for key, seq in floor.items():
                got = state.get(key)
                if key not in bad and (got is None or got[2] < seq):
                    what = "fsynced" if self.syncs_only else "acknowledged"
                    found.append(f"{key}: {what} {seq} before the read, stored {got and got[2]}")
            for problem in found:
                if problem not in seen:
                    seen.add(problem)
                    result.torn.append(f"while running (poll {result.polls}): {problem}")
            time.sleep(self.source.poll_pause)

    # -- remount

    def _remount_and_sweep(self, store: Path, found: list, result: RoundResult,
                           record: Record) -> EnvMount:
        """Mount again (no write-back delay; journal mode: the same journal, replayed before
        the mount serves, and then every acknowledged write must be in the store): the view
        shows exactly the store and no temporary name; one chunk of every shard is rewritten
        (which sweeps aged leftovers of its directory); afterwards no leftover may remain (nor
        a journal segment). Sets the store state the next round starts from; returns the
        (unmounted) remount."""
        self.source.age_leftovers(120)
        view = self.mount(*self._journal_flags())
        try:
            if self.journaled:
                store = self._check_replay(record, result)
            diffs = view_matches_store(view.path(ARRAY), store / ARRAY)
            if diffs:
                result.other.append(f"the remount does not show the store: {diffs[:6]}")
            visible = [name for _, dirs, files in os.walk(view.path()) for name in dirs + files
                       if TEMP_MARKER in name]
            if visible:
                result.other.append(f"temporary files visible in the remount: {visible[:6]}")
            self._touch_every_shard(view, store / ARRAY)
        except OSError as e:
            result.other.append(f"the remount failed: {e}")
        finally:
            view.stop()
        if self.journaled:
            self._check_journal_emptied(view, result)
        left = self.source.leftovers()
        kept_alive = [rel for rel in left if _pid_of(rel) is not None and pid_alive(_pid_of(rel))]
        result.swept = len(set(found) - set(left))
        if set(left) - set(kept_alive):
            result.other.append(f"leftovers not swept by the remount: {sorted(left)[:6]}")
        after = self.source.store(f"{result.round}-swept")
        problems = stored_problems(after / ARRAY, allow_temp=bool(kept_alive))
        if problems:
            result.torn += [f"after the remount: {p}" for p in problems]
        state, bad = store_state(after / ARRAY)
        result.torn += [f"after the remount: {b}" for b in bad.values()]
        self.previous = {k: v[2] for k, v in state.items()}
        return view

    def _check_replay(self, record: Record, result: RoundResult) -> Path:
        """Journal mode, the remount live (so its replay done): the store read again must hold
        every write whose close() returned (or the one in flight after it), nothing torn and
        nothing never written. Returns the store as read."""
        store = self.source.store(f"{result.round}-replayed")
        replayed = RoundResult(result.round)
        check_store(store / ARRAY, record, self.previous, False, replayed)
        _merge_failures(result, replayed, "after the remount's replay: ")
        result.landed = replayed.landed
        return store

    def _check_journal_emptied(self, view: EnvMount, result: RoundResult) -> None:
        """Journal mode, the remount unmounted (its log complete): the log says it committed
        the journal's files when the kill left acknowledged writes out of the store, at least
        that many; it exited 0, and its journal holds no segment (everything journaled was
        committed at the unmount)."""
        said = REPLAY_LINE.findall(view.log_text())
        result.replayed, already = (int(said[-1][0]), int(said[-1][1])) if said else (0, 0)
        # A commit sent just before the kill may still land after it (through a delaying proxy
        # the request is on its way): missing from the store read after the kill, the replay then
        # finds it stored already. Every acknowledged write being there after the replay is
        # checked on the store itself (`_check_replay`).
        if result.pending and not said:
            result.other.append(f"{result.pending} acknowledged writes were not in the store after "
                                f"the kill, and the remount logged no replay of the journal")
        elif result.pending > result.replayed + already:
            result.other.append(f"the remount's replay committed {result.replayed} files and found "
                                f"{already} stored, but {result.pending} acknowledged writes were "
                                f"not in the store after the kill")
        code = view.proc.returncode if view.proc is not None else None
        if code != 0:
            result.other.append(f"the remount did not exit cleanly after its unmount (exit {code})")
        segments = sorted(p.name for p in self.journal_dir.glob("seg-*.zj"))
        if segments:
            result.other.append(f"the journal {self.journal_dir} still holds {segments[:6]} after "
                                f"the remount was unmounted")

    def _touch_every_shard(self, view: EnvMount, array_dir: Path) -> None:
        """Rewrite the first chunk of every shard: its stored bytes, or a seq-0 payload."""
        layout = si.load_layout(array_dir)
        stored = si.expected_chunk_files(layout)
        per = tuple(s // i for s, i in zip(layout.chunk_shape, layout.inner_shape))
        for shard in product(*map(range, layout.shard_grid)):
            first = tuple(s * p for s, p in zip(shard, per))
            key = si.chunk_key(first, layout.cke)
            index = self.keys.index(key)
            data = stored.get(key) or payload(index % self.threads, index, 0)
            path = view.path(ARRAY) / key
            path.parent.mkdir(parents=True, exist_ok=True)  # implicit while nothing is stored
            path.write_bytes(data)

    # -- campaigns

    def run(self, rounds: int, on_round=None) -> list[RoundResult]:
        for n in range(rounds):
            r = self.round(n)
            if on_round:
                on_round(r)
        return self.results


def _merge_failures(result: RoundResult, checked: RoundResult, prefix: str) -> None:
    """Add the failure lists of `checked` (one check of the round) to the round's, prefixed."""
    for name in ("torn", "lost_acked", "lost_synced", "invented", "other"):
        getattr(result, name).extend(f"{prefix}{p}" for p in getattr(checked, name))


def _pid_of(rel: str) -> int | None:
    """The writer pid in a temporary file's name (`.zarrfs-tmp.<name>.<pid>.<n>`)."""
    parts = os.path.basename(rel).rsplit(".", 2)
    try:
        return int(parts[-2]) if len(parts) == 3 and parts[-1].isdigit() else None
    except ValueError:
        return None


@dataclass
class Summary:
    source: str
    mode: str
    rounds: int
    acks: int
    synced: int
    in_flight: int
    landed: int
    mid_commit: int
    torn: int
    lost_acked: int
    lost_synced: int
    invented: int
    other: int
    leftovers: int
    swept: int
    unsynced_lost: int
    pending: int
    replayed: int
    polls: int
    seconds: float

    @property
    def failed(self) -> bool:
        return bool(self.torn or self.lost_acked or self.lost_synced or self.invented or self.other)


def summarize(loop: CrashLoop, seconds: float) -> Summary:
    rs = loop.results
    return Summary(loop.source.kind, loop.mode, len(rs), sum(r.acks for r in rs),
                   sum(r.synced for r in rs), sum(r.in_flight for r in rs),
                   sum(r.landed for r in rs), sum(1 for r in rs if r.leftovers),
                   sum(len(r.torn) for r in rs), sum(len(r.lost_acked) for r in rs),
                   sum(len(r.lost_synced) for r in rs), sum(len(r.invented) for r in rs),
                   sum(len(r.other) for r in rs), sum(r.leftovers for r in rs),
                   sum(r.swept for r in rs), sum(r.unsynced_lost for r in rs),
                   sum(r.pending for r in rs), sum(r.replayed for r in rs),
                   sum(r.polls for r in rs), seconds)
