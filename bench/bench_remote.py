#!/usr/bin/env python3
"""Helper of bench/bench_remote.sh: fixtures, measurements that need Python, and the table.

Subcommands (WORK is the benchmark's work directory):
    prepare WORK --scale F --files N --mib M
        bench/small and bench/large (fixtures.py bench shapes, 8 KiB and 128 KiB inner chunks,
        written by tensorstore) under WORK/fx/root with their expected data, N random files of
        M MiB under WORK/big, and WORK/layout.json (shards, chunk files, bytes per array)
    stats MNT                     the mount's `user.zarrfs.stats` (one JSON line)
    vmhwm PID                     peak RSS (VmHWM) of PID in bytes, or "-" if it is gone
    reqs LOG START PREFIX         requests for keys under PREFIX in moto's log after line START
                                  (JSON: get, head, list, other)
    direct PREFIX KEY...          read the objects whole with boto3 (no FUSE); prints seconds
    verify-copy DIR WORK SIZE     DIR holds exactly the chunk files of bench/SIZE with the
                                  expected bytes (exit 1 with the reason otherwise)
    range-probe PREFIX KEY        moto's time for a 128 KiB ranged GET of KEY and of a 1 MiB object
    per-array WORK SIZE=DELTA...  stats deltas per array, with their shard counts (JSON)
    random-reads MNT WORK SIZE N SEED
                                  on a mounted unsharded view: read bench/SIZE's metadata, then
                                  N distinct random chunk files (verified); prints a JSON record
    delta S0 S1                   difference of two stats JSON documents
    layout WORK WHAT              WHAT = small|large: that array's layout (JSON); else the sum of
                                  that field over both arrays (stored_bytes, shards, chunk_files)
    size 16M                      a --cache-size value in bytes
    record RESULTS KEY=VALUE... [+JSON]
                                  append a record (values parsed as JSON when they are JSON;
                                  +{...} merges an object)
    table RESULTS                 print the three sections
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
import time
import urllib.parse
from pathlib import Path

import numpy as np

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"  # fixtures.py, seed_remote.py, mount_stats.py
sys.path.insert(0, str(SCRIPTS))
from mount_stats import mount_stats  # noqa: E402

SIZES = ("small", "large")
LABEL = {"small": "8 KiB", "large": "128 KiB"}


# ---------------------------------------------------------------------------------------------
# fixtures


def bench_spec(size: str, scale: float):
    import fixtures

    specs = {s.path.split("/")[-1]: s for s in fixtures.bench_specs(scale)}
    return specs[size]


def prepare(work: Path, scale: float, files: int, mib: int) -> None:
    import fixtures

    out = work / "fx"
    root = out / "root"
    root.mkdir(parents=True, exist_ok=True)
    (out / "expected").mkdir(exist_ok=True)
    fixtures.write_group(root, "", {"description": "zarrfs remote benchmark"})
    fixtures.write_group(root, "bench", {})
    layout = {"scale": scale, "arrays": {}, "big": []}
    for size in SIZES:
        spec = bench_spec(size, scale)
        fixtures.write_array(out, spec)
        shard_files = [p for p in (root / spec.path).rglob("*") if p.is_file() and p.name != "zarr.json"]
        inner = spec.inner_chunk_shape
        grid = [math.ceil(n / c) for n, c in zip(spec.shape, inner)]
        layout["arrays"][size] = {
            "path": spec.path,
            "shape": list(spec.shape),
            "shard_shape": list(spec.chunks),
            "inner": list(inner),
            "grid": grid,
            "chunk_files": math.prod(grid),
            "chunk_bytes": math.prod(inner),  # uint8, `bytes` codec: exact
            "shards": len(shard_files),
            "stored_bytes": sum(p.stat().st_size for p in shard_files),
            "expected": f"expected/{spec.path.replace('/', '__')}.npy",
        }
    big = work / "big"
    big.mkdir(exist_ok=True)
    rng = np.random.default_rng(20261121)
    for i in range(files):
        p = big / f"f{i}.bin"
        with open(p, "wb") as f:
            for _ in range(mib):
                f.write(rng.bytes(1 << 20))
        layout["big"].append({"name": p.name, "bytes": p.stat().st_size})
    (work / "layout.json").write_text(json.dumps(layout, indent=1) + "\n")


def load_layout(work: Path) -> dict:
    return json.loads((work / "layout.json").read_text())


def expected_chunk(data: np.ndarray, coords: tuple, inner: list) -> bytes:
    region = tuple(slice(c * s, min((c + 1) * s, n)) for c, s, n in zip(coords, inner, data.shape))
    return np.ascontiguousarray(data[region]).tobytes()


def chunk_rel(coords: tuple) -> str:
    return "c/" + "/".join(str(c) for c in coords)


# ---------------------------------------------------------------------------------------------
# measurements


def stats(mnt: str) -> dict:
    return mount_stats(mnt)


def vmhwm(pid: str) -> str:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return str(int(line.split()[1]) * 1024)
    except OSError:
        pass
    return "-"


ANSI = re.compile(r"\x1b\[[0-9;]*m")
REQUEST = re.compile(r'"([A-Z]+) (\S+) HTTP/[0-9.]+" (\d{3})')


def reqs(log: str, start: int, prefix: str) -> dict:
    """Count the requests moto logged (werkzeug access log) after line START whose object key
    or listing prefix lies under PREFIX."""
    counts = {"get": 0, "head": 0, "list": 0, "other": 0}
    prefix = prefix.strip("/") + "/"
    try:
        lines = Path(log).read_text(errors="replace").splitlines()[start:]
    except OSError:
        return {"error": f"cannot read {log}"}
    for line in lines:
        m = REQUEST.search(ANSI.sub("", line))
        if not m:
            continue
        method, target, _status = m.groups()
        parts = urllib.parse.urlsplit(target)
        path = urllib.parse.unquote(parts.path)
        query = urllib.parse.parse_qs(parts.query)
        bucket, _, key = path.lstrip("/").partition("/")
        listed = query.get("prefix", [""])[0]
        if key.startswith(prefix):
            kind = {"GET": "get", "HEAD": "head"}.get(method, "other")
        elif not key and listed and (listed.startswith(prefix) or prefix.startswith(listed)):
            kind = "list"
        else:
            continue
        counts[kind] += 1
    return counts


def direct(prefix: str, keys: list) -> float:
    import seed_remote as SR

    s3 = SR.s3_client()
    t0 = time.monotonic()
    for key in keys:
        body = s3.get_object(Bucket=SR.BUCKET, Key=SR.join_key(prefix, key))["Body"]
        while body.read(1 << 20):
            pass
    return time.monotonic() - t0


def range_probe(prefix: str, key: str, n: int = 8) -> dict:
    """How long moto takes for a 128 KiB ranged GET of KEY, against the same on a 1 MiB object:
    moto reads the whole object for each range, so its cost grows with the object's size."""
    import seed_remote as SR

    s3 = SR.s3_client()
    small = SR.join_key(prefix, ".range-probe-1MiB")
    s3.put_object(Bucket=SR.BUCKET, Key=small, Body=os.urandom(1 << 20))
    size = s3.head_object(Bucket=SR.BUCKET, Key=SR.join_key(prefix, key))["ContentLength"]
    out = {"section": "probe", "object_bytes": size}
    for name, k in (("big_ms", SR.join_key(prefix, key)), ("small_ms", small)):
        t0 = time.monotonic()
        for i in range(n):
            lo = (i * 131072) % ((1 << 20) - 131072)
            s3.get_object(Bucket=SR.BUCKET, Key=k, Range=f"bytes={lo}-{lo + 131071}")["Body"].read()
        out[name] = round((time.monotonic() - t0) * 1000 / n, 2)
    s3.delete_object(Bucket=SR.BUCKET, Key=small)
    return out


def verify_copy(dest: Path, work: Path, size: str) -> str | None:
    """None if DEST holds exactly the chunk files of bench/SIZE with the expected bytes."""
    arr = load_layout(work)["arrays"][size]
    data = np.load(work / "fx" / arr["expected"], mmap_mode="r")
    meta = json.loads((dest / "zarr.json").read_text())
    got_chunk = meta["chunk_grid"]["configuration"]["chunk_shape"]
    if got_chunk != arr["inner"]:
        return f"zarr.json chunk shape {got_chunk}, expected {arr['inner']}"
    files = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    files.discard("zarr.json")
    want = set()
    for coords in np.ndindex(*arr["grid"]):
        rel = chunk_rel(coords)
        want.add(rel)
        if rel in files and (dest / rel).read_bytes() != expected_chunk(data, coords, arr["inner"]):
            return f"{rel}: bytes differ from the written data"
    if files != want:
        return (f"{len(want - files)} chunk files missing (e.g. {sorted(want - files)[:3]}), "
                f"{len(files - want)} unexpected (e.g. {sorted(files - want)[:3]})")
    return None


def random_reads(mnt: str, work: Path, size: str, n: int, seed: int) -> dict:
    arr = load_layout(work)["arrays"][size]
    data = np.load(work / "fx" / arr["expected"], mmap_mode="r")
    base = Path(mnt) / arr["path"]
    per_shard = [s // c for s, c in zip(arr["shard_shape"], arr["inner"])]
    rng = np.random.default_rng(seed)
    picks = rng.choice(arr["chunk_files"], size=min(n, arr["chunk_files"]), replace=False)
    coords_list = [tuple(int(c) for c in np.unravel_index(int(i), arr["grid"])) for i in picks]
    s0 = stats(mnt)
    os.stat(base)
    (base / "zarr.json").read_bytes()
    s1 = stats(mnt)
    t0 = time.monotonic()
    got = 0
    for coords in coords_list:
        with open(base / chunk_rel(coords), "rb") as f:
            b = f.read()
        if b != expected_chunk(data, coords, arr["inner"]):
            raise SystemExit(f"random read of {arr['path']}/{chunk_rel(coords)}: wrong bytes")
        got += len(b)
    secs = time.monotonic() - t0
    s2 = stats(mnt)
    shards = {tuple(c // p for c, p in zip(coords, per_shard)) for coords in coords_list}
    return {"reads": len(coords_list), "shards_touched": len(shards), "bytes": got,
            "seconds": round(secs, 4), "meta": delta(s0, s1), "delta": delta(s1, s2)}


def delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after}


# ---------------------------------------------------------------------------------------------
# results


def parse_value(v: str):
    try:
        return json.loads(v)
    except ValueError:
        return v


def record(results: str, pairs: list) -> None:
    rec = {}
    for pair in pairs:
        if pair.startswith("+"):  # +{json object}: merged in
            rec.update(json.loads(pair[1:]))
            continue
        k, _, v = pair.partition("=")
        rec[k] = parse_value(v)
    with open(results, "a") as f:
        f.write(json.dumps(rec) + "\n")


def mib(n) -> str:
    return "-" if n in (None, "-") else f"{int(n) / 2**20:.0f} MiB"


def per_array(r: dict, f, total) -> str:
    if total is None:
        return "-"
    parts = [f"{total:.2f}"]
    if r.get("per_array"):
        parts.append(" (" + " / ".join(f"{f(r['per_array'][s]):.2f}" for s in SIZES
                                       if s in r["per_array"]) + ")")
    return "".join(parts)


def fmt_table(head: list, rows: list) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(head)]
    out = ["  ".join(f"{h:>{w}}" for h, w in zip(head, widths))]
    out += ["  ".join(f"{str(c):>{w}}" for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def table(results: str) -> None:
    recs = [json.loads(line) for line in open(results) if line.strip()]
    by = {}
    for r in recs:
        by.setdefault(r["section"], []).append(r)

    # 1. throughput
    rows, speeds = [], {}
    tp = by.get("throughput", [])
    for r in tp:
        if not r.get("unavailable"):
            speeds[r["tool"]] = r["bytes"] / 1e6 / r["seconds"]
    for r in tp:
        if r.get("unavailable"):
            rows.append([r["tool"], "-", "-", "-", "", "-", "-", "-", "unavailable: " + r["unavailable"]])
            continue
        mbs = speeds[r["tool"]]
        z = speeds.get("zarrfs raw")
        req = r.get("reqs") or {}
        files = r.get("files", 1)
        gets = f"{req['get'] / files:.1f}" if "get" in req else "-"
        heads = f"{req['head'] / files:.1f}" if "head" in req else "-"
        vs = f"{z / mbs:.2f}x" if z and r["tool"] != "zarrfs raw" else ""
        rows.append([r["tool"], f"{r['seconds']:.2f}", r.get("runs", "-"), f"{mbs:.0f}", vs, gets, heads,
                     mib(r.get("vmhwm")), r.get("note", "")])
    if tp:
        first = next((r for r in tp if not r.get("unavailable")), tp[0])
        print(f"\n1. Large-file sequential read: {first.get('files', '?')} objects x "
              f"{mib(first.get('file_bytes'))}, dd bs=1M one after another, fresh mount and "
              "dropped page cache per run, fastest run")
        print(fmt_table(["reader", "seconds", "runs", "MB/s", "zarrfs/this", "GET/file", "HEAD/file",
                         "peak RSS", "notes"], rows))
        print("zarrfs/this: zarrfs raw view's MB/s divided by this reader's (>1: zarrfs is faster). "
              "GET/HEAD per file: counted in moto's request log.")
        for p in by.get("probe", []):
            print(f"moto serves a 128 KiB ranged GET of a {mib(p['object_bytes'])} object in "
                  f"{p['big_ms']:.1f} ms, of a 1 MiB object in {p['small_ms']:.1f} ms (it reads "
                  "the whole object per range):\nreaders issuing many small ranged GETs of large "
                  "objects pay that per request.")

    # 1b. throughput over plain HTTP
    th = by.get("throughput_http", [])
    if th:
        rows, speeds = [], {}
        for r in th:
            if not r.get("unavailable"):
                speeds[r["tool"]] = r["bytes"] / 1e6 / r["seconds"]
        for r in th:
            if r.get("unavailable"):
                rows.append([r["tool"], "-", "-", "-", "", "-", "unavailable: " + r["unavailable"]])
                continue
            mbs, z = speeds[r["tool"]], speeds.get("zarrfs raw")
            vs = f"{z / mbs:.2f}x" if z and r["tool"] != "zarrfs raw" else ""
            rows.append([r["tool"], f"{r['seconds']:.2f}", r.get("runs", "-"), f"{mbs:.0f}", vs,
                         mib(r.get("vmhwm")), r.get("note", "")])
        print("\n1b. The same files over plain HTTP (nginx: ranges served without re-reading the file), "
              "fresh mount and dropped page cache per run, fastest run")
        print(fmt_table(["reader", "seconds", "runs", "MB/s", "zarrfs/this", "peak RSS", "notes"], rows))

    # 1c. cp -r over plain HTTP by listing
    ph = by.get("plain_http", [])
    if ph:
        base = {r["size"]: r["seconds"] for r in ph if r["listing"] == "WebDAV"}
        rows = []
        for r in ph:
            d, a = r["delta"], r["array"]
            ratio = f"{base[r['size']] / r['seconds']:.2f}x" if r["size"] in base else "-"
            rows.append([LABEL[r["size"]], r["listing"], a["chunk_files"], a["shards"],
                         f"{r['seconds']:.2f}", f"{a['stored_bytes'] / 1e6 / r['seconds']:.0f}", ratio,
                         d.get("http_requests", "-"), d["get"], d["head"], d["list"] + d["list_dir"],
                         d.get("shard_probes", "-"), d.get("key_probes", "-")])
        print("\n1c. Cold cp -r of each bench array (unsharded view) from nginx, by how it lists "
              "directories; fresh mount, dropped page cache")
        print(fmt_table(["chunks", "listing", "files", "shards", "seconds", "MB/s", "WebDAV/this",
                         "requests", "GET", "HEAD", "LIST", "shard probes", "key probes"], rows))
        print("WebDAV/this: the WebDAV mount's seconds divided by this one's (>1: faster). requests: "
              "on the wire; GET/HEAD/LIST: the store's calls.")

    # 2. requests
    cp = by.get("requests", [])
    if cp:
        rows = []
        for r in cp:
            d = r["delta"]
            a = r["array"]
            lists = d["list"] + d["list_dir"]
            if r["op"].startswith("random"):
                reads = r["reads"]
                rows.append([LABEL[r["size"]], r["op"], reads, r["shards_touched"],
                             f"{r['seconds']:.2f}", "-", f"{r['seconds'] * 1000 / reads:.1f}",
                             d["get"], f"{d['get'] / r['shards_touched']:.2f}",
                             f"{d['get'] / reads:.3f}", f"{d['get_bytes'] / max(r['bytes'], 1):.1f}",
                             d["head"], lists, f"{r['meta']['get']} GET {r['meta']['head']} HEAD"])
            else:
                rows.append([LABEL[r["size"]], r["op"], a["chunk_files"], a["shards"],
                             f"{r['seconds']:.2f}", f"{a['stored_bytes'] / 1e6 / r['seconds']:.0f}",
                             f"{r['seconds'] * 1000 / a['chunk_files']:.2f}",
                             d["get"], f"{d['get'] / a['shards']:.2f}",
                             f"{d['get'] / a['chunk_files']:.3f}",
                             f"{d['get_bytes'] / a['stored_bytes']:.2f}", d["head"], lists,
                             "in the row"])
        print("\n2. Requests of the unsharded view (user.zarrfs.stats deltas; default --cache-size "
              "and --prefetch-size; page cache dropped before each step)")
        print(fmt_table(["chunks", "operation", "files", "shards", "seconds", "MB/s", "ms/file",
                         "GET", "GET/shard", "GET/chunk", "bytes amp", "HEAD", "LIST",
                         "array metadata"], rows))
        print("shards: stored shards of the array (random reads: shards they touched). bytes amp: "
              "get_bytes / bytes copied or read.\nLIST: list + list_dir requests. Array metadata: "
              "requests of stat + zarr.json of the array before the random reads (not in the row).")

    # 3. memory
    mem = by.get("memory", [])
    if mem:
        rows = []
        for r in mem:
            cache = r.get("cache_bytes")
            hwm = r.get("vmhwm")
            d = r.get("delta")
            ratio = (f"{int(hwm) / int(cache):.2f}" if cache and hwm not in (None, "-") else "-")
            rows.append([r["mount"], mib(cache) if cache else "default 512M",
                         f"{r['scanned'] / 1e6:.0f} MB" if r.get("scanned") else "-",
                         f"{r['scanned'] / cache:.1f}x" if cache and r.get("scanned") else "-",
                         f"{r['seconds']:.1f}" if r.get("seconds") else "-",
                         mib(r.get("rss_idle")), mib(hwm), ratio,
                         per_array(r, lambda a: a["get"] / a["shards"], d["get"] / r["shards"] if d else None),
                         per_array(r, lambda a: a["get_bytes"] / a["stored_bytes"],
                                   d["get_bytes"] / r["scanned"] if d else None)])
        print("\n3. zarrfs daemon memory: peak RSS (VmHWM of /proc/PID/status) after the scan")
        print(fmt_table(["mount", "--cache-size", "scanned", "scanned/cache", "seconds",
                         "RSS at mount", "peak RSS", "peak/cache", "GET/shard", "bytes amp"], rows))
        print("GET/shard and bytes amp (get_bytes / stored bytes): all, then 8 KiB / 128 KiB arrays.")


# ---------------------------------------------------------------------------------------------


def main(argv: list) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "prepare":
        import argparse

        p = argparse.ArgumentParser(prog="bench_remote.py prepare")
        p.add_argument("work", type=Path)
        p.add_argument("--scale", type=float, default=1.0)
        p.add_argument("--files", type=int, default=4)
        p.add_argument("--mib", type=int, default=64)
        a = p.parse_args(args)
        prepare(a.work, a.scale, a.files, a.mib)
    elif cmd == "stats":
        print(json.dumps(stats(args[0])))
    elif cmd == "vmhwm":
        print(vmhwm(args[0]))
    elif cmd == "reqs":
        print(json.dumps(reqs(args[0], int(args[1]), args[2])))
    elif cmd == "direct":
        print(f"{direct(args[0], args[1:]):.4f}")
    elif cmd == "verify-copy":
        err = verify_copy(Path(args[0]), Path(args[1]), args[2])
        if err:
            print(f"bench_remote.py: copy {args[0]} of bench/{args[2]}: {err}", file=sys.stderr)
            return 1
    elif cmd == "random-reads":
        print(json.dumps(random_reads(args[0], Path(args[1]), args[2], int(args[3]), int(args[4]))))
    elif cmd == "range-probe":
        print(json.dumps(range_probe(args[0], args[1])))
    elif cmd == "per-array":  # WORK SIZE=DELTA...: {size: {get, get_bytes, shards, stored_bytes}}
        arrays = load_layout(Path(args[0]))["arrays"]
        out = {}
        for pair in args[1:]:
            size, _, d = pair.partition("=")
            d = json.loads(d)
            out[size] = {"get": d["get"], "get_bytes": d["get_bytes"],
                         "shards": arrays[size]["shards"], "stored_bytes": arrays[size]["stored_bytes"]}
        print(json.dumps(out))
    elif cmd == "delta":
        print(json.dumps(delta(json.loads(args[0]), json.loads(args[1]))))
    elif cmd == "layout":  # WORK small|large|stored_bytes|shards
        arrays = load_layout(Path(args[0]))["arrays"]
        if args[1] in arrays:
            print(json.dumps(arrays[args[1]]))
        else:
            print(sum(a[args[1]] for a in arrays.values()))
    elif cmd == "size":  # 16M -> bytes
        v = args[0].strip().upper()
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        print(int(float(v[:-1]) * units[v[-1]]) if v[-1] in units else int(v))
    elif cmd == "record":
        record(args[0], args[1:])
    elif cmd == "table":
        table(args[0])
    else:
        print(f"bench_remote.py: unknown subcommand {cmd}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
