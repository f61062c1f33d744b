#!/usr/bin/env python3
"""Write the zarrfs test hierarchy with two real Zarr clients.

Usage: fixtures.py OUTDIR [--sets default,bench] [--bench-scale F]

Layout of OUTDIR:
    root/            the Zarr v3 hierarchy to mount (SOURCE of `zarrfs mount`)
    expected/        one .npy per array: the data that was written
    manifest.json    what is where (see `write_manifest`)

Every array is written by zarr-python 3 or by tensorstore through their public APIs; the
metadata of each array is the JSON document handed to the client, so both clients write the
same kinds of arrays. Data is deterministic (numpy generator seeded from the array path).

The default set covers: index at end and at start, with and without the crc32c index codec,
little- and big-endian index, nested sharding, edge shards, missing inner chunks and whole
missing shards, 0-d to 4-d arrays, uint8/int16/float32/float64/complex/bool, inner codecs
blosc/zstd/gzip/bytes, `default` keys with `/` and `.` and `v2` keys with `.` and `/`, an array
with no shard written, unsharded arrays, groups with attributes and non-Zarr files.

The `bench` set holds big uint8 arrays with inner chunks of 8 KiB and 128 KiB (`bytes`-only and
zstd), and one of 65,536 tiny inner chunks (for `find` and `ls -lR`), written by tensorstore
(the fast writer), for bench/bench_read.sh.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import zlib
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path

import numpy as np

ZARR_PY = "zarr-python"
TENSORSTORE = "tensorstore"

# ---------------------------------------------------------------------------------------------
# codec and metadata JSON builders


def c_bytes(endian: str = "little") -> dict:
    return {"name": "bytes", "configuration": {"endian": endian}}


def c_gzip(level: int = 5) -> dict:
    return {"name": "gzip", "configuration": {"level": level}}


def c_zstd(level: int = 3) -> dict:
    return {"name": "zstd", "configuration": {"level": level, "checksum": False}}


def c_blosc(typesize: int, cname: str = "lz4", shuffle: str = "shuffle") -> dict:
    return {"name": "blosc", "configuration": {
        "cname": cname, "clevel": 5, "shuffle": shuffle, "typesize": typesize, "blocksize": 0}}


def cke_default(sep: str = "/") -> dict:
    return {"name": "default", "configuration": {"separator": sep}}


def cke_v2(sep: str = ".") -> dict:
    return {"name": "v2", "configuration": {"separator": sep}}


@dataclass
class Level:
    """One sharding level: its inner chunk shape and how its index is stored."""
    chunk_shape: tuple
    index_location: str = "end"
    index_crc: bool = True
    index_endian: str = "little"

    def codec(self, inner_codecs: list) -> dict:
        index_codecs = [c_bytes(self.index_endian)] + ([{"name": "crc32c"}] if self.index_crc else [])
        return {"name": "sharding_indexed", "configuration": {
            "chunk_shape": list(self.chunk_shape),
            "codecs": inner_codecs,
            "index_codecs": index_codecs,
            "index_location": self.index_location,
        }}


@dataclass
class ArraySpec:
    """An array of the fixture hierarchy.

    chunks: the stored chunk grid (the shard shape when `levels` is non-empty).
    levels: sharding levels from outermost to innermost; empty for an unsharded array.
    codecs: the innermost codecs (what an unsharded view of the array uses).
    holes: fraction of innermost chunks overwritten with the fill value (not stored).
    empty_shards: shard grid coordinates overwritten entirely with the fill value.
    """
    path: str
    writer: str
    shape: tuple
    dtype: str
    chunks: tuple
    codecs: list
    levels: list = field(default_factory=list)
    cke: dict = field(default_factory=cke_default)
    fill_value: object = 0
    holes: float = 0.25
    empty_shards: list = field(default_factory=list)
    write: bool = True
    attributes: dict = field(default_factory=dict)
    dimension_names: list | None = None
    value_bits: int | None = None  # integer values below 2**value_bits (compressible data)
    notes: str = ""

    @property
    def sharded(self) -> bool:
        return bool(self.levels)

    @property
    def inner_chunk_shape(self) -> tuple:
        return tuple(self.levels[-1].chunk_shape) if self.levels else tuple(self.chunks)

    def codec_chain(self) -> list:
        chain = self.codecs
        for level in reversed(self.levels):
            chain = [level.codec(chain)]
        return chain

    def metadata(self) -> dict:
        """The zarr.json document (as handed to tensorstore)."""
        md = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(self.shape),
            "data_type": self.dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(self.chunks)}},
            "chunk_key_encoding": self.cke,
            "fill_value": json_fill(self.fill_value, self.dtype),
            "codecs": self.codec_chain(),
            "attributes": self.attributes,
        }
        if self.dimension_names is not None:
            md["dimension_names"] = self.dimension_names
        return md


def json_fill(value, dtype: str):
    """The fill value as Zarr v3 JSON for the data type."""
    if np.dtype(dtype).kind == "c":
        value = complex(value)
        return [json_fill(value.real, "float64"), json_fill(value.imag, "float64")]
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


# ---------------------------------------------------------------------------------------------
# the default fixture set


def default_specs() -> list[ArraySpec]:
    """Arrays of the default set; the path prefix says which client writes them."""
    zp, ts = ZARR_PY, TENSORSTORE
    return [
        # --- zarr-python
        ArraySpec("zp/u8_1d_end_crc_gzip", zp, (1000,), "uint8", (256,), [c_bytes(), c_gzip()],
                  [Level((32,))], empty_shards=[(2,)],
                  notes="edge shard; one whole shard missing"),
        ArraySpec("zp/i16_2d_start_nocrc_blosc_dot", zp, (50, 70), "int16", (20, 32),
                  [c_bytes(), c_blosc(2)], [Level((10, 8), "start", False)], cke=cke_default("."),
                  attributes={"title": "int16 2-d", "nested": {"k": [1, 2, 3]}},
                  dimension_names=["y", "x"]),
        ArraySpec("zp/f32_3d_end_crc_zstd_v2dot", zp, (9, 10, 11), "float32", (4, 4, 4),
                  [c_bytes(), c_zstd()], [Level((2, 2, 2))], cke=cke_v2("."),
                  fill_value=float("nan"), notes="NaN fill value and NaN data"),
        ArraySpec("zp/f64_4d_start_crc_bytes_v2slash", zp, (6, 5, 4, 7), "float64", (4, 4, 2, 4),
                  [c_bytes()], [Level((2, 2, 1, 2), "start", True)], cke=cke_v2("/")),
        ArraySpec("zp/f64_1d_bigendian_index", zp, (37,), "float64", (8,),
                  [c_bytes("big")], [Level((2,), "end", True, "big")],
                  notes="big-endian index and data"),
        ArraySpec("zp/i16_2d_nested", zp, (20, 22), "int16", (8, 8), [c_bytes(), c_zstd()],
                  [Level((4, 4)), Level((2, 2), "start", False)], notes="nested sharding"),
        ArraySpec("zp/c128_2d_sharded", zp, (12, 10), "complex128", (8, 8), [c_bytes()],
                  [Level((4, 4), "end", False)]),
        ArraySpec("zp/bool_2d_sharded", zp, (16, 16), "bool", (8, 8), [c_bytes(), c_gzip(1)],
                  [Level((4, 4))], fill_value=False),
        ArraySpec("zp/empty_noshard", zp, (30, 30), "float32", (10, 10), [c_bytes()],
                  [Level((5, 5))], write=False, notes="no shard written"),
        ArraySpec("plain/sub/naïve array", zp, (12, 12), "uint8", (8, 8), [c_bytes()],
                  [Level((4, 4))], notes="non-ASCII name with a space"),
        ArraySpec("zp/unsharded_2d", zp, (25, 30), "int16", (10, 10), [c_bytes(), c_zstd()],
                  attributes={"kind": "plain"}),
        ArraySpec("zp/unsharded_0d", zp, (), "float64", (), [c_bytes()], holes=0.0,
                  notes="zarr-python cannot shard a 0-d array"),
        # --- tensorstore
        ArraySpec("ts/u8_2d_end_crc_blosc", ts, (100, 90), "uint8", (32, 32),
                  [c_bytes(), c_blosc(1, "zstd", "bitshuffle")], [Level((8, 8))],
                  empty_shards=[(1, 1)]),
        ArraySpec("ts/i16_3d_start_nocrc_gzip_dot", ts, (10, 12, 9), "int16", (4, 6, 4),
                  [c_bytes(), c_gzip()], [Level((2, 3, 2), "start", False)],
                  cke=cke_default(".")),
        ArraySpec("ts/f32_1d_end_nocrc_bytes", ts, (300,), "float32", (64,), [c_bytes()],
                  [Level((16,), "end", False)]),
        ArraySpec("ts/f64_4d_end_crc_zstd_v2dot", ts, (5, 6, 3, 4), "float64", (4, 4, 2, 2),
                  [c_bytes(), c_zstd()], [Level((2, 2, 1, 2))], cke=cke_v2(".")),
        ArraySpec("ts/c64_2d_nested", ts, (10, 13), "complex64", (8, 8), [c_bytes()],
                  [Level((4, 4), "end", True), Level((2, 2), "end", False)],
                  notes="nested sharding"),
        ArraySpec("ts/bool_2d_v2slash", ts, (20, 20), "bool", (8, 8), [c_bytes()],
                  [Level((4, 4), "start", True)], cke=cke_v2("/"), fill_value=False),
        ArraySpec("ts/u8_2d_many_files_dot", ts, (512, 520), "uint8", (64, 64), [c_bytes()],
                  [Level((8, 8))], cke=cke_default("."), holes=0.1,
                  notes="about 3800 chunk files in one directory (readdir paging)"),
        ArraySpec("ts/u8_2d_big_chunks", ts, (1024, 1000), "uint8", (1024, 1024), [c_bytes()],
                  [Level((512, 512), "start", True)], holes=0.0,
                  notes="256 KiB inner chunks (reads span several FUSE requests)"),
        ArraySpec("ts/f32_0d_sharded", ts, (), "float32", (), [c_bytes()], [Level(())],
                  holes=0.0, notes="0-d sharded array: its only key is `c`"),
        ArraySpec("ts/u8_1d_noshard", ts, (50,), "uint8", (16,), [c_bytes()], [Level((4,))],
                  write=False, notes="no shard written"),
        ArraySpec("ts/unsharded_3d", ts, (7, 8, 9), "uint8", (4, 4, 4), [c_bytes(), c_gzip()]),
    ]


def bench_specs(scale: float) -> list[ArraySpec]:
    """Big uint8 arrays with inner chunks of about 8 KiB and 128 KiB as stored: `bytes`-only
    (random data, exact sizes), and `zstd` over 4-bit data (compresses about 2:1, so a
    re-encode has real decoding and encoding to do), no holes."""
    def rows(n):
        return max(1, int(round(n * scale)))
    small = ArraySpec("bench/small", TENSORSTORE, (rows(64) * 64, 8192), "uint8", (512, 1024),
                      [c_bytes()], [Level((64, 128), "end", True)], holes=0.0,
                      notes="8 KiB inner chunks")
    large = ArraySpec("bench/large", TENSORSTORE, (rows(48) * 256, 16384), "uint8", (1024, 2048),
                      [c_bytes()], [Level((256, 512), "end", True)], holes=0.0,
                      notes="128 KiB inner chunks")
    small_zstd = ArraySpec("bench/small_zstd", TENSORSTORE, (rows(64) * 64, 16384), "uint8",
                           (512, 2048), [c_bytes(), c_zstd()], [Level((64, 256), "end", True)],
                           holes=0.0, value_bits=4, notes="16 KiB raw, ~8 KiB zstd inner chunks")
    large_zstd = ArraySpec("bench/large_zstd", TENSORSTORE, (rows(48) * 256, 32768), "uint8",
                           (1024, 4096), [c_bytes(), c_zstd()], [Level((256, 1024), "end", True)],
                           holes=0.0, value_bits=4, notes="256 KiB raw, ~128 KiB zstd inner chunks")
    specs = [small, large, small_zstd, large_zstd]
    for spec in specs:
        shard_rows = spec.chunks[0]
        spec.shape = (math.ceil(spec.shape[0] / shard_rows) * shard_rows, spec.shape[1])
    # Many tiny chunk files for `find` and `ls -lR` (not scaled): 65,536 files of 64 bytes.
    many = ArraySpec("bench/many", TENSORSTORE, (2048, 2048), "uint8", (256, 256), [c_bytes()],
                     [Level((8, 8), "end", True)], holes=0.0, notes="65,536 inner chunks of 64 B")
    return specs + [many]


# ---------------------------------------------------------------------------------------------
# deterministic data


def seed_of(path: str) -> int:
    return zlib.crc32(path.encode())


def random_values(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "ui":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -30000), min(info.max, 30000), size=shape,
                            endpoint=True).astype(dt)
    if dt.kind == "f":
        return rng.normal(0, 100, size=shape).astype(dt)
    if dt.kind == "c":
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dt)
    raise ValueError(dtype)


def region(coords: tuple, chunk_shape: tuple, shape: tuple) -> tuple:
    return tuple(slice(c * s, min((c + 1) * s, n)) for c, s, n in zip(coords, chunk_shape, shape))


def grid(shape: tuple, chunk_shape: tuple) -> list:
    return list(product(*(range(math.ceil(n / c)) for n, c in zip(shape, chunk_shape))))


def make_data(spec: ArraySpec) -> np.ndarray:
    """Random data with holes: some inner chunks and whole shards set to the fill value."""
    rng = np.random.default_rng(seed_of(spec.path))
    if spec.value_bits is not None:
        data = rng.integers(0, 2 ** spec.value_bits, size=spec.shape).astype(spec.dtype)
    else:
        data = random_values(rng, spec.shape, spec.dtype)
    fill = np.array(spec.fill_value).astype(spec.dtype)
    if np.dtype(spec.dtype).kind == "f" and data.size > 3:
        data.flat[rng.choice(data.size, 3, replace=False)] = np.nan  # NaN inside data chunks
    if spec.shape == ():
        return data
    for coords in grid(spec.shape, spec.inner_chunk_shape):
        if rng.random() < spec.holes:
            data[region(coords, spec.inner_chunk_shape, spec.shape)] = fill
    for coords in spec.empty_shards:
        data[region(coords, spec.chunks, spec.shape)] = fill
    return data


# ---------------------------------------------------------------------------------------------
# writers


def write_zarr_python(root: Path, spec: ArraySpec, data: np.ndarray | None) -> None:
    import zarr
    from zarr.storage import LocalStore

    cke = spec.cke
    arr = zarr.create(
        shape=spec.shape, chunks=spec.chunks, dtype=spec.dtype, fill_value=spec.fill_value,
        codecs=spec.codec_chain(), zarr_format=3, store=LocalStore(root), path=spec.path,
        chunk_key_encoding=(cke["name"], cke["configuration"]["separator"]),
        attributes=spec.attributes, dimension_names=spec.dimension_names,
    )
    if data is not None:
        arr[...] = data


def write_tensorstore(root: Path, spec: ArraySpec, data: np.ndarray | None) -> None:
    import tensorstore as ts

    store = ts.open({
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(root / spec.path)},
        "metadata": spec.metadata(),
    }, create=True, delete_existing=True).result()
    if data is not None:
        store.write(data).result()


WRITERS = {ZARR_PY: write_zarr_python, TENSORSTORE: write_tensorstore}


def write_array(outdir: Path, spec: ArraySpec) -> dict:
    """Write one array and its expected data; return its manifest entry."""
    data = make_data(spec)
    WRITERS[spec.writer](outdir / "root", spec, data if spec.write else None)
    expected = data if spec.write else np.full(spec.shape, spec.fill_value, dtype=spec.dtype)
    npy = f"expected/{spec.path.replace('/', '__')}.npy"
    np.save(outdir / npy, expected)
    return {
        "path": spec.path,
        "kind": "sharded" if spec.sharded else "unsharded",
        "writer": spec.writer,
        "expected": npy,
        "shape": list(spec.shape),
        "dtype": spec.dtype,
        "chunk_shape": list(spec.chunks),
        "inner_chunk_shape": list(spec.inner_chunk_shape),
        "nesting": len(spec.levels),
        "chunk_key_encoding": spec.cke,
        "written": spec.write,
        "nan": bool(np.dtype(spec.dtype).kind in "fc"),
        "notes": spec.notes,
    }


# ---------------------------------------------------------------------------------------------
# groups and non-Zarr files


def write_group(root: Path, path: str, attributes: dict) -> None:
    import zarr
    from zarr.storage import LocalStore

    zarr.create_group(store=LocalStore(root), path=path, attributes=attributes, zarr_format=3)


def write_groups_and_files(root: Path) -> tuple[list, list]:
    """Groups (written by zarr-python) and non-Zarr files; returns (groups, files)."""
    groups = {
        "": {"description": "zarrfs test hierarchy", "version": 1},
        "zp": {"writer": ZARR_PY},
        "ts": {"writer": TENSORSTORE},
        "plain": {"units": "m", "list": [1, 2.5, "x"], "unicode": "Zürich ✓"},
        "plain/sub": {},
    }
    for path, attrs in groups.items():
        write_group(root, path, attrs)
    rng = np.random.default_rng(7)
    files = {
        "README.txt": b"zarrfs fixtures: a Zarr v3 hierarchy written by zarr-python and tensorstore.\n",
        "misc/notes.bin": rng.bytes(5000),
        "plain/sub/.hidden": b"dot file\n",
    }
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content)
    legacy = write_legacy(root, rng)
    return sorted(groups), sorted(list(files) + legacy)


def write_legacy(root: Path, rng: np.random.Generator) -> list:
    """Zarr v2 (zarr-python, zarr_format=2: .zgroup/.zattrs/.zarray, `0.0` and `0/0` keys) and a
    Zarr v1-style array (`meta`, `attrs`, `0`): nothing to unshard, all passed through."""
    import zarr
    from zarr.storage import LocalStore
    store = LocalStore(root / "legacy")
    v2 = zarr.open_group(store=store, path="v2", mode="w", zarr_format=2, attributes={"kind": "v2"})
    a = v2.create_array("dots", shape=(6, 5), chunks=(4, 4), dtype="int32")
    a[:] = np.arange(30, dtype="int32").reshape(6, 5)
    b = v2.create_array("slashes", shape=(5,), chunks=(2,), dtype="float64",
                        chunk_key_encoding={"name": "v2", "separator": "/"})
    b[:] = rng.normal(size=5)
    v1 = root / "legacy" / "v1"
    v1.mkdir(parents=True)
    (v1 / "meta").write_text(json.dumps({"zarr_format": 1, "shape": [4], "chunks": [4], "dtype": "<u1",
                                         "compression": None, "fill_value": 0, "order": "C"}))
    (v1 / "attrs").write_text("{}")
    (v1 / "0").write_bytes(bytes([1, 2, 3, 4]))
    return sorted(str(p.relative_to(root)) for p in (root / "legacy").rglob("*") if p.is_file())


def write_manifest(outdir: Path, arrays: list, groups: list, files: list, sets: list) -> None:
    manifest = {
        "format": 1,
        "root": "root",
        "sets": sets,
        "arrays": arrays,
        "groups": groups,
        "other_files": files,
    }
    (outdir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def build(outdir: Path, sets: list, bench_scale: float = 1.0, quiet: bool = False) -> dict:
    """Write the hierarchy for the named sets into outdir (emptied first); return the manifest."""
    if outdir.exists():
        shutil.rmtree(outdir)
    (outdir / "root").mkdir(parents=True)
    (outdir / "expected").mkdir()
    groups, files = write_groups_and_files(outdir / "root")
    specs = []
    if "default" in sets:
        specs += default_specs()
    if "bench" in sets:
        write_group(outdir / "root", "bench", {})
        groups = sorted(groups + ["bench"])
        specs += bench_specs(bench_scale)
    arrays = []
    for spec in specs:
        if not quiet:
            print(f"fixtures: {spec.writer:12s} {spec.path}", file=sys.stderr)
        arrays.append(write_array(outdir, spec))
    write_manifest(outdir, arrays, groups, files, sets)
    return json.loads((outdir / "manifest.json").read_text())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--sets", default="default",
                        help="comma-separated: default, bench (default: %(default)s)")
    parser.add_argument("--bench-scale", type=float, default=1.0,
                        help="scale the bench arrays' row count (default 1: ~32 MB and ~192 MB)")
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    unknown = set(sets) - {"default", "bench"}
    if unknown:
        parser.error(f"unknown sets: {sorted(unknown)}")
    manifest = build(args.outdir, sets, args.bench_scale, args.quiet)
    print(f"fixtures: wrote {len(manifest['arrays'])} arrays to {args.outdir}/root", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
