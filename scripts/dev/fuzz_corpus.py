"""Seed corpora for the fuzz targets (src/fuzzing.rs), from the real-client fixtures.

Usage: fuzz_corpus.py OUT    writes OUT/<target>/<name> (the repository keeps them in
fuzz/corpus/; a stable test feeds every file to its target, so run this again only to refresh
the seeds). Each seed is in the input format its target documents: flags first where the
target takes flags, a zero byte between a document and the bytes it applies to.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import struct
import sys
import tempfile
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1]  # fixtures.py, bad_fixtures.py
sys.path.insert(0, str(SCRIPTS))

MAX_SHARD = 8 << 10


def put(out: Path, target: str, data: bytes) -> None:
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def main(out: Path) -> None:
    import fixtures
    import bad_fixtures
    with tempfile.TemporaryDirectory() as tmp:
        good = Path(tmp) / "good"
        fixtures.build(good, ["default"], quiet=True)
        bad = Path(tmp) / "bad"
        bad_fixtures.build(bad)
        for root in (good / "root", bad):
            for doc in sorted(root.rglob("zarr.json")):
                put(out, "zarr_json", doc.read_bytes())
                try:
                    meta = json.loads(doc.read_bytes())
                except ValueError:
                    meta = {}
                if not isinstance(meta, dict):
                    meta = {}
                shards = [p for p in doc.parent.rglob("*") if p.is_file() and p.name != "zarr.json"]
                for shard in sorted(shards)[:1]:
                    if shard.stat().st_size <= MAX_SHARD:
                        put(out, "shard_pack", doc.read_bytes() + b"\0" + shard.read_bytes())
                codecs = meta.get("codecs") or []
                if isinstance(codecs, list) and codecs and isinstance(codecs[0], dict) \
                        and codecs[0].get("name") == "sharding_indexed" and "chunk_grid" in meta:
                    cfg = codecs[0]["configuration"]
                    per = 1
                    for s, c in zip(meta["chunk_grid"]["configuration"]["chunk_shape"], cfg["chunk_shape"]):
                        per *= max(1, s // c)
                    crc = any(c.get("name") == "crc32c" for c in cfg.get("index_codecs", []))
                    big = cfg["index_codecs"][0].get("configuration", {}).get("endian") == "big"
                    size = 16 * per + (4 if crc else 0)
                    for shard in sorted(shards)[:1]:
                        blob = shard.read_bytes()
                        index = blob[-size:] if cfg.get("index_location", "end") == "end" else blob[:size]
                        flags = (1 if big else 0) | (2 if crc else 0)
                        put(out, "shard_index", bytes([flags]) + struct.pack("<H", min(per, 65535)) + index)
        for name in (".zarray", "meta"):
            for doc in sorted((good / "root").rglob(name)):
                put(out, "legacy", doc.read_bytes())
        for key in ["c/0/1", "c.3.2", "0.0", "1/2/3", "c", "0", "c4/5", "c1.2", "c/01/2", "c/-1"]:
            for flags in (0, 1, 2, 3, 4, 5, 16, 17, 18, 19, 20, 21, 24):
                put(out, "chunk_key", bytes([flags]) + key.encode())
    # Draft documents: the 2020 form zarr-python 2.18 writes and the 2022 seed's.
    put(out, "draft", json.dumps({"zarr_format": "https://purl.org/zarr/spec/protocol/core/3.0",
                                  "metadata_encoding": "https://purl.org/zarr/spec/protocol/core/3.0",
                                  "metadata_key_suffix": ".json", "extensions": []}).encode())
    for transformer in ({"extension": "https://purl.org/zarr/spec/storage_transformers/sharding/1.0",
                         "type": "indexed", "configuration": {"chunks_per_shard": [2, 2]}},
                        {"name": "sharding", "configuration": {"chunks_per_shard": [1, 3]}}):
        put(out, "draft", json.dumps({
            "attributes": {}, "chunk_grid": {"chunk_shape": [3, 2], "separator": "/", "type": "regular"},
            "chunk_memory_layout": "C", "compressor": {"codec": "https://purl.org/zarr/spec/codec/zlib/1.0",
                                                       "configuration": {"level": 1}},
            "data_type": "<i4", "extensions": [], "fill_value": -1, "shape": [10, 9],
            "storage_transformers": [transformer]}).encode())
    # Codec chains with data for them.
    raw = bytes(range(256)) * 8
    put(out, "bytes_codecs", b'[{"name": "gzip", "configuration": {"level": 1}}]\0' + gzip.compress(raw, mtime=0))
    put(out, "bytes_codecs", b'[{"name": "crc32c"}]\0' + raw + struct.pack("<I", 0))
    put(out, "bytes_codecs", b'[{"name": "zstd", "configuration": {"level": 1}}]\0(\xb5/\xfd\x00Xa\x00\x00')
    put(out, "bytes_codecs", b'[{"name": "blosc", "configuration": {}}]\0\x02\x01\x21\x04\x10\x00\x00\x00')
    # Mount option lists (one argument per line).
    for argv in ["mount\n/data/x.zarr\n/mnt/x\n-o\nro,view=raw,cache_size=1G",
                 "/data/x.zarr\n/mnt/x\n-o\nrw,allow_other,uid=1000,x-systemd.automount,_netdev",
                 "mount\ns3://b/x\n/m\n-oview=v2,no_sign_request,aws_region=eu,v2_compressor=gzip",
                 "mount\nhttps://h/p\n/m\n-o\nmetadata_ttl=5,max_probe_shards=10,write_back_delay=1.5"]:
        put(out, "mount_options", argv.encode())


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
