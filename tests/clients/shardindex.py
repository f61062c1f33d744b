"""An independent little reader of sharded Zarr v3 arrays on a local filesystem.

It knows just enough of the specs (v3 core, chunk key encodings, `sharding_indexed`, and the
`bytes`/`gzip`/`zstd`/`blosc`/`crc32c` codecs) to say what zarrfs must show for an array:
which chunk files exist in the unsharded view, their exact bytes, and the rewritten zarr.json.
It shares no code with zarrfs or with the clients that wrote the fixtures (numcodecs is used
only to decompress inner chunks when reassembling whole arrays).

Nested sharding is flattened: the view of an array whose inner codecs are again a sharding
codec shows the innermost chunks, at keys of the innermost chunk grid.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from itertools import product
from pathlib import Path

import crc32c as crc32c_lib
import numpy as np

EMPTY = 2**64 - 1


class ShardError(Exception):
    """A shard that cannot be read: truncated, bad checksum, entry out of bounds."""


class Unsupported(Exception):
    """A codec chain this reader does not handle."""


# --------------------------------------------------------------------------------------------
# metadata


@dataclass
class Level:
    """One sharding level: shape of its inner chunks and how its index is encoded."""
    chunk_shape: tuple
    endian: str
    crc: bool
    location: str

    def index_size(self, n_chunks: int) -> int:
        return 16 * n_chunks + (4 if self.crc else 0)


def parse_level(codec: dict) -> Level:
    conf = codec["configuration"]
    index_codecs = conf["index_codecs"]
    names = [c["name"] for c in index_codecs]
    if names not in (["bytes"], ["bytes", "crc32c"]):
        raise Unsupported(f"index codecs {names}")
    endian = index_codecs[0].get("configuration", {}).get("endian", "little")
    return Level(tuple(conf["chunk_shape"]), endian, names[-1] == "crc32c",
                 conf.get("index_location", "end"))


def sharding_levels(codecs: list) -> tuple[list[Level], list]:
    """Split a codec chain into sharding levels (outermost first) and the innermost codecs.

    A chain is sharded when it is exactly one `sharding_indexed` codec; nested levels follow
    while a level's inner codecs are again exactly one sharding codec.
    """
    levels = []
    while len(codecs) == 1 and codecs[0]["name"] == "sharding_indexed":
        levels.append(parse_level(codecs[0]))
        codecs = codecs[0]["configuration"]["codecs"]
    if any(c["name"] == "sharding_indexed" for c in codecs):
        raise Unsupported("sharding codec combined with other codecs")
    return levels, codecs


def chunk_key(coords: tuple, cke: dict) -> str:
    """The store key (relative to the array) of a chunk, per its chunk key encoding."""
    conf = cke.get("configuration") or {}
    if cke["name"] == "default":
        sep = conf.get("separator", "/")
        return sep.join(["c"] + [str(c) for c in coords])
    if cke["name"] == "v2":
        sep = conf.get("separator", ".")
        return sep.join(str(c) for c in coords) if coords else "0"
    raise Unsupported(f"chunk key encoding {cke['name']}")


def grid_shape(shape: tuple, chunk_shape: tuple) -> tuple:
    return tuple(math.ceil(n / c) for n, c in zip(shape, chunk_shape))


@dataclass
class Layout:
    """What a sharded (or unsharded) array looks like in the store."""
    directory: Path
    meta: dict
    shape: tuple
    dtype: np.dtype
    chunk_shape: tuple          # stored chunk grid: the shard shape if sharded
    levels: list
    inner_codecs: list          # codecs of the innermost chunks (the view's codecs)
    cke: dict

    @property
    def sharded(self) -> bool:
        return bool(self.levels)

    @property
    def inner_shape(self) -> tuple:
        return self.levels[-1].chunk_shape if self.levels else self.chunk_shape

    @property
    def inner_grid(self) -> tuple:
        return grid_shape(self.shape, self.inner_shape)

    @property
    def shard_grid(self) -> tuple:
        return grid_shape(self.shape, self.chunk_shape)


def load_layout(directory: Path) -> Layout:
    meta = json.loads((Path(directory) / "zarr.json").read_text())
    if meta.get("node_type") != "array":
        raise ValueError(f"{directory} is not an array")
    levels, inner = sharding_levels(meta["codecs"])
    return Layout(Path(directory), meta, tuple(meta["shape"]), np.dtype(meta["data_type"]),
                  tuple(meta["chunk_grid"]["configuration"]["chunk_shape"]), levels, inner,
                  meta.get("chunk_key_encoding", {"name": "default"}))


def view_metadata(meta: dict) -> dict:
    """The zarr.json zarrfs must show for an array: chunk shape and codecs of the innermost
    chunks, every other member unchanged."""
    levels, inner = sharding_levels(meta["codecs"])
    if not levels:
        return meta
    out = json.loads(json.dumps(meta))
    out["chunk_grid"]["configuration"]["chunk_shape"] = list(levels[-1].chunk_shape)
    out["codecs"] = inner
    return out


# --------------------------------------------------------------------------------------------
# shard index


def decode_index(raw: bytes, n_chunks: int, level: Level) -> list[tuple[int, int]]:
    """(offset, nbytes) per inner chunk, in C order, from the encoded index bytes."""
    if len(raw) != level.index_size(n_chunks):
        raise ShardError(f"index is {len(raw)} bytes, expected {level.index_size(n_chunks)}")
    body = raw[:16 * n_chunks]
    if level.crc:
        (stored,) = struct.unpack("<I", raw[16 * n_chunks:])
        if crc32c_lib.crc32c(body) != stored:
            raise ShardError("index crc32c mismatch")
    fmt = ("<" if level.endian == "little" else ">") + f"{2 * n_chunks}Q"
    values = struct.unpack(fmt, body)
    return list(zip(values[0::2], values[1::2]))


def read_index(shard: bytes, n_chunks: int, level: Level) -> list[tuple[int, int]]:
    size = level.index_size(n_chunks)
    if len(shard) < size:
        raise ShardError(f"shard of {len(shard)} bytes is shorter than its index ({size})")
    raw = shard[:size] if level.location == "start" else shard[len(shard) - size:]
    return decode_index(raw, n_chunks, level)


def split_shard(shard: bytes, shard_shape: tuple, levels: list[Level]) -> dict[tuple, bytes]:
    """Innermost chunks of one shard: {coords within the shard (innermost grid): bytes}.

    Empty entries are skipped; an entry out of bounds raises ShardError. Nested levels recurse.
    """
    level = levels[0]
    per_shard = grid_shape(shard_shape, level.chunk_shape)
    entries = read_index(shard, math.prod(per_shard), level)
    innermost = levels[-1].chunk_shape
    scale = tuple(a // b for a, b in zip(level.chunk_shape, innermost))
    out = {}
    for coords, (offset, nbytes) in zip(product(*map(range, per_shard)), entries):
        if offset == EMPTY and nbytes == EMPTY:
            continue
        if offset + nbytes > len(shard):
            raise ShardError(f"entry {coords} [{offset}, +{nbytes}) past end {len(shard)}")
        chunk = shard[offset:offset + nbytes]
        if len(levels) == 1:
            out[coords] = chunk
            continue
        for sub, data in split_shard(chunk, level.chunk_shape, levels[1:]).items():
            out[tuple(c * s + x for c, s, x in zip(coords, scale, sub))] = data
    return out


# --------------------------------------------------------------------------------------------
# what the view must show


def stored_shards(layout: Layout) -> dict[tuple, Path]:
    """Shard grid coordinates -> path of each shard file that exists."""
    found = {}
    for coords in product(*map(range, layout.shard_grid)):
        path = layout.directory / chunk_key(coords, layout.cke)
        if path.is_file():
            found[coords] = path
    return found


def inner_chunks(layout: Layout) -> dict[tuple, bytes]:
    """Innermost chunk grid coordinates -> encoded bytes, for every stored non-empty chunk
    inside the array's innermost chunk grid."""
    if not layout.sharded:
        return {c: p.read_bytes() for c, p in stored_shards(layout).items()}
    per = tuple(s // i for s, i in zip(layout.chunk_shape, layout.inner_shape))
    out = {}
    for shard_coords, path in stored_shards(layout).items():
        for local, data in split_shard(path.read_bytes(), layout.chunk_shape, layout.levels).items():
            coords = tuple(s * p + x for s, p, x in zip(shard_coords, per, local))
            if all(c < g for c, g in zip(coords, layout.inner_grid)):
                out[coords] = data
    return out


def expected_chunk_files(layout: Layout) -> dict[str, bytes]:
    """View key (relative to the array directory) -> bytes, for every chunk file of the view."""
    return {chunk_key(c, layout.cke): b for c, b in inner_chunks(layout).items()}


# --------------------------------------------------------------------------------------------
# decoding, to reassemble arrays (a check of the reader itself)


def fill_value(layout: Layout):
    value = layout.meta["fill_value"]
    if isinstance(value, list):
        return complex(*(float(v) for v in value))
    if isinstance(value, str):
        return float(value)  # "NaN", "Infinity", "-Infinity"
    return value


def decode_chunk(data: bytes, codecs: list, shape: tuple, dtype: np.dtype) -> np.ndarray:
    import numcodecs

    for codec in reversed(codecs[1:]):
        name = codec["name"]
        if name == "gzip":
            data = numcodecs.GZip().decode(data)
        elif name == "zstd":
            data = numcodecs.Zstd().decode(data)
        elif name == "blosc":
            data = numcodecs.Blosc().decode(data)
        elif name == "crc32c":
            if crc32c_lib.crc32c(data[:-4]) != struct.unpack("<I", data[-4:])[0]:
                raise ShardError("chunk crc32c mismatch")
            data = data[:-4]
        else:
            raise Unsupported(f"codec {name}")
    head = codecs[0]
    if head["name"] != "bytes":
        raise Unsupported(f"array-to-bytes codec {head['name']}")
    endian = head.get("configuration", {}).get("endian", "little")
    dt = dtype.newbyteorder("<" if endian == "little" else ">") if dtype.itemsize > 1 else dtype
    return np.frombuffer(bytes(data), dtype=dt).reshape(shape).astype(dtype)


def assemble(layout: Layout, chunks: dict[tuple, bytes]) -> np.ndarray:
    """The whole array from innermost chunks (missing chunks are the fill value)."""
    out = np.full(layout.shape, fill_value(layout), dtype=layout.dtype)
    inner = layout.inner_shape
    for coords, data in chunks.items():
        chunk = decode_chunk(data, layout.inner_codecs, inner, layout.dtype)
        sel = tuple(slice(c * s, min((c + 1) * s, n)) for c, s, n in zip(coords, inner, layout.shape))
        out[sel] = chunk[tuple(slice(0, s.stop - s.start) for s in sel)]
    return out
