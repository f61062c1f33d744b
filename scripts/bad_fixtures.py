#!/usr/bin/env python3
"""Write a Zarr v3 hierarchy of damaged arrays next to a healthy one, for zarrfs error tests.

Usage: bad_fixtures.py OUTDIR

Every array is first written intact by zarr-python, then damaged on disk:
    truncated_tail   index at start; the shard c/0 loses its last bytes, so the inner chunk
                     stored last runs past the end of the file
    truncated_short  index at end; the shard c/1 is cut to 10 bytes (shorter than its index)
    bad_crc          one byte of the shard index of c/0 flipped: crc32c mismatch
    past_end         an index entry of c/0 points past the end of the shard (crc32c recomputed,
                     so only a bounds check catches it)
    not_json         zarr.json is not JSON (a chunk file c/0 lies beside it)
    unknown_outer_codec  a bytes-to-bytes codec "frobnicate" after the sharding codec
    unknown_inner_codec  an inner codec "frobnicate" inside the sharding codec
    absurd_shape     shape [2**40, 2**40] with one shard stored
    healthy          an intact sharded array

Layout: OUTDIR/root (the hierarchy), OUTDIR/expected/*.npy, OUTDIR/manifest.json. Each manifest
entry says what a mount must do with the array (`expect`), which view keys are affected, and a
regular expression for the reason that the daemon log must give.
"""
from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
from pathlib import Path

import crc32c
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fixtures as fx  # noqa: E402

EMPTY = 2**64 - 1
REASON_SIZE = r"(?i)(truncat|short|eof|end of|past|beyond|out of (range|bounds)|bounds|size|length)"
REASON_CRC = r"(?i)(crc|checksum)"
REASON_JSON = r"(?i)(json|parse|malformed|syntax|expected)"
REASON_CODEC = r"(?i)(frobnicate|codec)"


def spec(path: str, shape, chunks, inner, location="end", crc=True, codecs=None) -> fx.ArraySpec:
    return fx.ArraySpec(path, fx.ZARR_PY, shape, "int16", chunks, codecs or [fx.c_bytes()],
                        [fx.Level(inner, location, crc)], holes=0.0)


def write(outdir: Path, s: fx.ArraySpec) -> tuple[Path, np.ndarray]:
    data = fx.make_data(s)
    data[data == 0] = 1  # no inner chunk equals the fill value: every entry is stored
    fx.write_zarr_python(outdir / "root", s, data)
    np.save(outdir / "expected" / f"{s.path}.npy", data)
    return outdir / "root" / s.path, data


def index_entries(shard: bytes, n: int, location: str, crc: bool) -> tuple[int, list]:
    """(start of the index in the shard, [[offset, nbytes], ...]) of a little-endian index."""
    size = 16 * n + (4 if crc else 0)
    start = 0 if location == "start" else len(shard) - size
    values = struct.unpack(f"<{2 * n}Q", shard[start:start + 16 * n])
    return start, [list(values[i:i + 2]) for i in range(0, 2 * n, 2)]


def encode_index(entries: list, crc: bool) -> bytes:
    body = struct.pack(f"<{2 * len(entries)}Q", *[v for e in entries for v in e])
    return body + (struct.pack("<I", crc32c.crc32c(body)) if crc else b"")


def keys_of(shard_coord: int, per_shard: int, entries: list) -> list[str]:
    """View keys (default `/` encoding, 1-d) of the non-empty entries of a shard."""
    return [f"c/{shard_coord * per_shard + i}" for i, (off, nb) in enumerate(entries)
            if (off, nb) != (EMPTY, EMPTY)]


def entry(path, damage, expect, affected=(), siblings=(), shard_key=None, reason=None,
          written=True, **more):
    """A manifest entry: `affected_keys` must fail with EIO, `sibling_keys` (same shard) may
    fail with EIO or must read correctly, `healthy_keys` (other shards) must read correctly."""
    return {"path": path, "damage": damage, "expect": expect, "affected_keys": list(affected),
            "sibling_keys": list(siblings), "shard_key": shard_key, "reason": reason,
            "expected": f"expected/{path}.npy" if written else None, **more}


def make_truncated_tail(outdir: Path) -> dict:
    array, _ = write(outdir, spec("truncated_tail", (64,), (32,), (8,), "start"))
    shard = array / "c/0"
    raw = shard.read_bytes()
    _, entries = index_entries(raw, 4, "start", True)
    last = max(range(4), key=lambda i: entries[i][0])
    shard.write_bytes(raw[:len(raw) - 3])
    keys = keys_of(0, 4, entries)
    return entry("truncated_tail", "last inner chunk of c/0 cut short", "eio",
                 [keys[last]], [k for k in keys if k != keys[last]], "truncated_tail/c/0",
                 REASON_SIZE)


def make_truncated_short(outdir: Path) -> dict:
    array, _ = write(outdir, spec("truncated_short", (64,), (32,), (8,), "end"))
    shard = array / "c/1"
    _, entries = index_entries(shard.read_bytes(), 4, "end", True)
    shard.write_bytes(shard.read_bytes()[:10])
    return entry("truncated_short", "shard c/1 cut to 10 bytes", "eio", keys_of(1, 4, entries),
                 [], "truncated_short/c/1", REASON_SIZE, healthy_keys=keys_of(0, 4, entries))


def make_bad_crc(outdir: Path) -> dict:
    array, _ = write(outdir, spec("bad_crc", (64,), (32,), (8,), "end"))
    shard = array / "c/0"
    raw = bytearray(shard.read_bytes())
    start, entries = index_entries(bytes(raw), 4, "end", True)
    raw[start + 1] ^= 0x01  # the second byte of the first offset: the crc no longer matches
    shard.write_bytes(bytes(raw))
    keys = keys_of(0, 4, entries)
    return entry("bad_crc", "index of c/0 has a flipped bit", "eio", keys, [], "bad_crc/c/0",
                 REASON_CRC, healthy_keys=keys_of(1, 4, entries))


def make_past_end(outdir: Path) -> dict:
    array, _ = write(outdir, spec("past_end", (64,), (32,), (8,), "end"))
    shard = array / "c/0"
    raw = shard.read_bytes()
    start, entries = index_entries(raw, 4, "end", True)
    keys = keys_of(0, 4, entries)
    entries[1][0] = len(raw) + 1000
    shard.write_bytes(raw[:start] + encode_index(entries, True))
    return entry("past_end", "entry 1 of c/0 points past the end (valid crc)", "eio", [keys[1]],
                 [k for k in keys if k != keys[1]], "past_end/c/0", REASON_SIZE,
                 healthy_keys=keys_of(1, 4, index_entries((array / "c/1").read_bytes(), 4, "end", True)[1]))


def make_not_json(outdir: Path) -> dict:
    array = outdir / "root" / "not_json"
    (array / "c").mkdir(parents=True)
    (array / "zarr.json").write_bytes(b'{"zarr_format": 3, "node_type": "array", this is not json\n')
    (array / "c" / "0").write_bytes(bytes(range(256)) * 3)
    return entry("not_json", "zarr.json is not JSON", "raw", shard_key="not_json/zarr.json",
                 reason=REASON_JSON, written=False)


def make_unknown_outer_codec(outdir: Path) -> dict:
    array, _ = write(outdir, spec("unknown_outer_codec", (16, 16), (8, 8), (4, 4)))
    meta = json.loads((array / "zarr.json").read_text())
    meta["codecs"].append({"name": "frobnicate", "configuration": {"strength": 11}})
    (array / "zarr.json").write_text(json.dumps(meta, indent=2))
    return entry("unknown_outer_codec", "unknown codec after sharding_indexed", "raw",
                 shard_key="unknown_outer_codec/zarr.json", reason=REASON_CODEC)


def make_unknown_inner_codec(outdir: Path) -> dict:
    array, _ = write(outdir, spec("unknown_inner_codec", (16, 16), (8, 8), (4, 4)))
    meta = json.loads((array / "zarr.json").read_text())
    meta["codecs"][0]["configuration"]["codecs"].append({"name": "frobnicate"})
    (array / "zarr.json").write_text(json.dumps(meta, indent=2))
    return entry("unknown_inner_codec", "unknown inner codec (bytes still relayable)",
                 "raw_or_unsharded", shard_key="unknown_inner_codec/zarr.json", reason=REASON_CODEC)


def make_absurd_shape(outdir: Path) -> dict:
    array, _ = write(outdir, spec("absurd_shape", (16, 16), (8, 8), (4, 4)))
    meta = json.loads((array / "zarr.json").read_text())
    meta["shape"] = [2**40, 2**40]
    (array / "zarr.json").write_text(json.dumps(meta, indent=2))
    return entry("absurd_shape", "shape [2**40, 2**40], four shards stored", "any",
                 shard_key="absurd_shape/zarr.json")


def make_healthy(outdir: Path) -> dict:
    write(outdir, spec("healthy", (20, 20), (8, 8), (4, 4)))
    return entry("healthy", "none", "ok")


MAKERS = [make_healthy, make_truncated_tail, make_truncated_short, make_bad_crc, make_past_end,
          make_not_json, make_unknown_outer_codec, make_unknown_inner_codec, make_absurd_shape]


def build(outdir: Path) -> dict:
    if outdir.exists():
        shutil.rmtree(outdir)
    (outdir / "root").mkdir(parents=True)
    (outdir / "expected").mkdir()
    fx.write_group(outdir / "root", "", {"description": "damaged inputs for zarrfs"})
    arrays = [make(outdir) for make in MAKERS]
    manifest = {"format": 1, "root": "root", "arrays": arrays, "groups": [""]}
    (outdir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outdir", type=Path)
    args = parser.parse_args(argv)
    manifest = build(args.outdir)
    print(f"bad_fixtures: wrote {len(manifest['arrays'])} arrays to {args.outdir}/root",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
