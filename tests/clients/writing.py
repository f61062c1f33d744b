"""Helpers of the write tests (tests/clients/test_write_*.py): the mount flags, small sharded
arrays built with the fixture writers, writes through the view with both clients, and strict
checks of the sharded store left behind (parsed with the independent reader shardindex.py).
"""
from __future__ import annotations

import json
import math
import os
import struct
from itertools import product
from pathlib import Path

import numpy as np

import fixtures as F
import shardindex as si
from helpers import READERS, assert_same_array, mount_stats, walk_files

# The flags of a writable mount, in one place. Mounts are writable by default now (when the
# source is writable); `--writable` is still accepted.
WRITE_FLAGS: list = []
# Flags of mounts that must refuse every mutation with EROFS.
READ_ONLY_FLAG_SETS = {"read-only": ["--read-only"]}

TEMP_MARKERS = (".zarrfs-tmp.", ".partial", ".__lock")


# ---------------------------------------------------------------------------------------------
# mounts and counters


def mount_writable(mounter, source, *options, foreground=False):
    return mounter(source, *WRITE_FLAGS, *options, foreground=foreground)


def stats(mount) -> dict:
    """The daemon's request counters (the mount's stats ioctl)."""
    return mount_stats(mount.path())


def delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after}


# ---------------------------------------------------------------------------------------------
# building arrays


def build(root: Path, specs: list) -> dict:
    """Write each fixtures.ArraySpec under root with its writer; return {path: data written}
    (the fill value everywhere for specs with write=False)."""
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "zarr.json").exists():
        F.write_group(root, "", {"purpose": "zarrfs write tests"})
    out = {}
    for spec in specs:
        data = F.make_data(spec)
        F.WRITERS[spec.writer](root, spec, data if spec.write else None)
        out[spec.path] = data if spec.write else np.full(spec.shape, spec.fill_value, spec.dtype)
    return out


def stored_meta(array_dir: Path) -> dict:
    return json.loads((Path(array_dir) / "zarr.json").read_bytes())


# ---------------------------------------------------------------------------------------------
# writing through the view with the clients


def open_zarr_python(directory: Path):
    import zarr
    from zarr.storage import LocalStore

    return zarr.open_array(store=LocalStore(str(directory)), mode="r+")


def write_zarr_python(directory: Path, writes: list) -> None:
    arr = open_zarr_python(directory)
    for region, values in writes:
        arr[region] = values


def write_tensorstore(directory: Path, writes: list) -> None:
    import tensorstore as ts

    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(directory) + "/"}},
                    open=True, read=True, write=True).result()
    for region, values in writes:
        store[region].write(values).result()


CLIENT_WRITERS = {"zarr-python": write_zarr_python, "tensorstore": write_tensorstore}


# ---------------------------------------------------------------------------------------------
# strict checks of a sharded store


def _check_shard(data: bytes, shard_shape: tuple, levels: list, where: str) -> list[str]:
    """Problems of one (possibly nested) shard: the index must decode at its configured
    location with its configured codecs (crc32c verified), no entry may be half empty, reach
    past the end, overlap the index or another entry, and not every entry may be empty."""
    level = levels[0]
    per = si.grid_shape(shard_shape, level.chunk_shape)
    n = math.prod(per)
    size = level.index_size(n)
    if len(data) < size:
        return [f"{where}: {len(data)} bytes, shorter than its index ({size})"]
    index_range = (0, size) if level.location == "start" else (len(data) - size, len(data))
    try:
        entries = si.decode_index(data[index_range[0]:index_range[1]], n, level)
    except si.ShardError as e:
        return [f"{where}: index at {level.location} does not decode: {e}"]
    problems, used = [], []
    for coords, (offset, nbytes) in zip(product(*map(range, per)), entries):
        if offset == si.EMPTY and nbytes == si.EMPTY:
            continue
        if offset == si.EMPTY or nbytes == si.EMPTY:
            problems.append(f"{where}: entry {coords} half empty ({offset}, {nbytes})")
            continue
        end = offset + nbytes
        if end > len(data):
            problems.append(f"{where}: entry {coords} [{offset}, {end}) past the end {len(data)}")
            continue
        if nbytes and offset < index_range[1] and index_range[0] < end:
            problems.append(f"{where}: entry {coords} [{offset}, {end}) overlaps the index {index_range}")
        for other, (o, e) in used:
            if nbytes and o < end and offset < e:
                problems.append(f"{where}: entries {other} and {coords} overlap")
        used.append((coords, (offset, end)))
        if len(levels) > 1:
            problems += _check_shard(data[offset:end], level.chunk_shape, levels[1:],
                                     f"{where} inner shard {coords}")
    if not used:
        problems.append(f"{where}: every entry is empty (the shard should have been erased)")
    return problems


def shard_problems(array_dir: Path, meta_before: dict | None = None,
                   allow_temp: bool = False) -> list[str]:
    """Every problem of a sharded array's stored form: the metadata's sharding configuration
    changed (compared with meta_before), a shard that fails the strict check, a file in the
    array directory that is neither zarr.json nor a shard key inside the shard grid (with
    allow_temp, zarrfs's own temporary files are allowed: a crash may leave them)."""
    array_dir = Path(array_dir)
    layout = si.load_layout(array_dir)
    problems = []
    if meta_before is not None:
        for member in ("codecs", "chunk_grid", "chunk_key_encoding", "data_type"):
            if layout.meta.get(member) != meta_before.get(member):
                problems.append(f"stored {member} changed: {layout.meta.get(member)} != "
                                f"{meta_before.get(member)}")
    if not layout.sharded:
        return problems + ["the stored array is not sharded any more"]
    shards = si.stored_shards(layout)
    keys = {si.chunk_key(c, layout.cke) for c in shards}
    for rel in walk_files(array_dir):
        if allow_temp and ".zarrfs-tmp." in os.path.basename(rel):
            continue
        if rel != "zarr.json" and rel not in keys:
            problems.append(f"stray file {rel} in the array directory")
    for coords, path in sorted(shards.items()):
        problems += _check_shard(path.read_bytes(), layout.chunk_shape, layout.levels,
                                 f"shard {path.relative_to(array_dir)}")
    return problems


def temp_files(root: Path) -> list[str]:
    """Files under root that look like a writer's temporary file."""
    return sorted(rel for rel in walk_files(root)
                  if any(m in os.path.basename(rel) for m in TEMP_MARKERS))


def chunk_regions(shape: tuple, chunk_shape: tuple):
    for coords in product(*(range(math.ceil(n / c)) for n, c in zip(shape, chunk_shape))):
        yield coords, F.region(coords, chunk_shape, shape)


def nonfill_chunks(data: np.ndarray, chunk_shape: tuple, fill) -> set:
    """Grid coordinates of the chunks of `data` holding anything but the fill value."""
    fill = np.array(fill).astype(data.dtype)
    out = set()
    for coords, region in chunk_regions(data.shape, chunk_shape):
        block = data[region]
        same = (block == fill) | (np.isnan(block) & np.isnan(fill) if data.dtype.kind in "fc" else False)
        if not np.all(same):
            out.add(coords)
    return out


def check_sharded_store(array_dir: Path, expected: np.ndarray, meta_before: dict,
                        what: str) -> None:
    """The sharded array as stored is exactly `expected` for both clients, every shard passes
    the strict check, the stored inner chunks are exactly the non-fill ones, and a shard file
    exists exactly for the shards holding a non-fill value."""
    problems = shard_problems(array_dir, meta_before)
    assert problems == [], f"{what}: {problems[:10]}"
    for client, read in sorted(READERS.items()):
        assert_same_array(read(array_dir), expected, f"{what}: {client} reading the store")
    layout = si.load_layout(array_dir)
    fill = si.fill_value(layout)
    stored = set(si.inner_chunks(layout))
    want = nonfill_chunks(expected, layout.inner_shape, fill)
    assert stored == want, (f"{what}: inner chunks stored but fill: {sorted(stored - want)[:8]}, "
                            f"non-fill but missing: {sorted(want - stored)[:8]}")
    shards = set(si.stored_shards(layout))
    want_shards = nonfill_chunks(expected, layout.chunk_shape, fill)
    assert shards == want_shards, (f"{what}: shard files of empty shards: "
                                   f"{sorted(shards - want_shards)}, missing shards: "
                                   f"{sorted(want_shards - shards)}")
    # the data decodes from the raw inner chunks too (the reader agrees with the clients)
    assert_same_array(si.assemble(layout, si.inner_chunks(layout)), expected,
                      f"{what}: independent reader")


def view_matches_store(view_dir: Path, array_dir: Path) -> list[str]:
    """Differences between the chunk files of the mounted view and the inner chunks of the
    store (names and bytes)."""
    expected = si.expected_chunk_files(si.load_layout(array_dir))
    got = {k: p.read_bytes() for k, p in walk_files(view_dir).items() if k != "zarr.json"}
    diffs = [f"missing in view: {k}" for k in sorted(set(expected) - set(got))]
    diffs += [f"extra in view: {k}" for k in sorted(set(got) - set(expected))]
    diffs += [f"bytes differ: {k}" for k in sorted(set(got) & set(expected)) if got[k] != expected[k]]
    return diffs


# ---------------------------------------------------------------------------------------------
# small payloads for the stress tests: uint8 arrays with `bytes`-only 16-byte inner chunks


PAYLOAD = struct.Struct("<4sIII")  # magic, writer, key index, sequence number (16 bytes)
MAGIC = b"zfsw"


def payload(writer: int, key: int, seq: int) -> bytes:
    return PAYLOAD.pack(MAGIC, writer, key, seq)


def parse_payload(data: bytes) -> tuple[int, int, int]:
    magic, writer, key, seq = PAYLOAD.unpack(data)
    assert magic == MAGIC, f"not a payload: {data!r}"
    return writer, key, seq


def lost_updates(results: list, owned: list, final: dict) -> list[str]:
    """The acknowledged writes of the CONCURRENT_WRITER processes (their `results`, each writer
    owning the (index, key) pairs of `owned[w]`) that the final store state does not hold."""
    lost = []
    for w, r in enumerate(results):
        for n, key in owned[w]:
            want = (w, n, r["acked"][key])
            if final.get(key) != want:
                lost.append(f"{key}: want writer/index/seq {want}, stored {final.get(key)}")
    return lost


def payload_spec(path: str, shape=(16, 16), shard=(8, 8), location="end", crc=True,
                 cke=None) -> F.ArraySpec:
    """A uint8 array with 4x4 inner chunks of `bytes` only: every inner chunk is exactly 16
    bytes, so any 16-byte payload is a valid chunk. Nothing written."""
    return F.ArraySpec(path, F.ZARR_PY, shape, "uint8", shard, [F.c_bytes()],
                       [F.Level((4, 4), location, crc)], cke=cke or F.cke_default("/"),
                       write=False)


# A writer process of the concurrency tests: waits for the GO file, then writes its chunk files
# (plain open/write/close) `rounds` times with (writer, key index, seq) payloads, and prints
# what was acknowledged: the last seq per key, the count, the errors, start and end times.
CONCURRENT_WRITER = r"""
import json, os, struct, sys, time
mnt, array, writer, rounds, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
keys = json.loads(sys.argv[6])
while not os.path.exists(go):
    time.sleep(0.001)
acked, errors, count = {}, [], 0
start = time.monotonic()
for seq in range(1, rounds + 1):
    for index, key in keys:
        data = struct.pack("<4sIII", b"zfsw", writer, index, seq)
        try:
            fd = os.open(os.path.join(mnt, array, key), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            acked[key] = seq
            count += 1
        except OSError as e:
            errors.append(f"{key} seq {seq}: {e}")
print(json.dumps({"acked": acked, "count": count, "errors": errors, "start": start, "end": time.monotonic()}))
"""


__all__ = ["WRITE_FLAGS", "READ_ONLY_FLAG_SETS", "assert_same_array"]
