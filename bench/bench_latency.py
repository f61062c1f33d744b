#!/usr/bin/env python3
"""Helper of bench/bench_latency.sh: zarrfs against the tools a user would otherwise reach
for, at cloud round trips, side by side in one run (see bench_latency.sh for what is measured).

Subcommands:
    run WORK --bin ZARRFS --proxy PROXY
        the whole benchmark (env: LATENCIES, SIZES, RUNS, FLOOR_RUNS, ROWS, CLIENT_CAP, LAT_S3_PORT,
        LAT_HTTP_PORT);
        results in WORK/results.jsonl, the table on stdout, progress on stderr
    client zarr|xarray|tensorstore SIZE TARGET [DEST]
        one Python client reading array SIZE of the fixture (TARGET: a URL or a directory;
        tensorstore: the array's URL, writing an unsharded copy to DEST); prints a JSON record
        {"seconds": open + read, "check": null or what was wrong}
    table RESULTS                 print the table of a results file again

The fixture: three xarray datasets root/{small,large,mid} written with `to_zarr(zarr_format=3)`
(consolidated metadata, dimension names), each one variable `data`, 4096x4096 uint16 random,
shards 1024x1024 (16 per array, 2 MiB each), no compression, inner chunks 64x64 (8 KiB),
256x256 (128 KiB) and 128x128 (32 KiB; listed only). The data is regenerated from its seed to
check every copy and every read.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SCRIPTS = REPO / "scripts"  # servers.sh, seed_remote.py, mount_stats.py
sys.path[:0] = [str(BENCH), str(SCRIPTS)]
from mount_stats import mount_stats  # noqa: E402

SHAPE = (4096, 4096)
SHARD = (1024, 1024)
VAR = "data"
ARRAYS = {"small": 64, "large": 256, "mid": 128}  # inner chunk side; mid is only listed
SEEDS = {"small": 1, "large": 2, "mid": 3}
LABEL = {"small": "8 KiB", "large": "128 KiB", "mid": "32 KiB"}
PREFIX = "lat"  # the fixture's place in the bucket (S3) and under the web root (/zarrfs/lat)
BUCKET = "zarrfs"  # the bucket servers.sh creates in moto
RCLONE_FLAGS = ["--transfers", "16", "--checkers", "16"]
TIMEOUT = 900


def say(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def now() -> float:
    return time.monotonic()


def fs_type(path: Path) -> str:
    """The file system holding PATH (the longest mount point above it in /proc/mounts)."""
    best, kind = "", "?"
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        mnt = parts[1].encode().decode("unicode_escape")
        if (str(path) == mnt or str(path).startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, kind = mnt, parts[2]
    return kind


def lat_name(lat: float | None) -> str:
    return "local" if lat is None else f"{lat:g} ms"


# ---------------------------------------------------------------------------------------------
# the fixture and its expected bytes


def expected(name: str) -> np.ndarray:
    rng = np.random.default_rng(20261126 + SEEDS[name])
    return rng.integers(0, 1 << 16, size=SHAPE, dtype=np.uint16)


def grid(name: str) -> tuple:
    return tuple(math.ceil(n / ARRAYS[name]) for n in SHAPE)


def chunk_bytes(data: np.ndarray, coords: tuple, side: int) -> bytes:
    region = tuple(slice(c * side, (c + 1) * side) for c in coords)
    return np.ascontiguousarray(data[region]).astype("<u2", copy=False).tobytes()


def write_fixture(root: Path) -> None:
    import warnings

    import xarray as xr
    import zarr

    warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
    root.mkdir(parents=True, exist_ok=True)
    zarr.create_group(str(root), zarr_format=3, attributes={"description": "zarrfs latency benchmark"})
    for name, side in ARRAYS.items():
        ds = xr.Dataset({VAR: (("y", "x"), expected(name))}, attrs={"inner_chunk": LABEL[name]})
        enc = {VAR: {"chunks": (side, side), "shards": SHARD, "compressors": None}}
        ds.to_zarr(str(root / name), zarr_format=3, mode="w", consolidated=True, encoding=enc)


def view_entries(name: str) -> set:
    """Every path (relative to the mount root) of array NAME in the unsharded view, directories
    included: the dataset group, its array, the array's chunk files c/i/j."""
    gy, gx = grid(name)
    out = {name, f"{name}/zarr.json", f"{name}/{VAR}", f"{name}/{VAR}/zarr.json", f"{name}/{VAR}/c"}
    for i in range(gy):
        out.add(f"{name}/{VAR}/c/{i}")
        out.update(f"{name}/{VAR}/c/{i}/{j}" for j in range(gx))
    return out


def all_view_entries() -> set:
    out = {"zarr.json"}
    for name in ARRAYS:
        out |= view_entries(name)
    return out


# ---------------------------------------------------------------------------------------------
# checks (None: right; otherwise what is wrong)


def check_view_copy(dest: Path, name: str) -> str | None:
    """DEST is a copy of array NAME's directory in the unsharded view: zarr.json with the inner
    chunk shape and no sharding, and exactly the chunk files, each the raw little-endian bytes."""
    try:
        meta = json.loads((dest / "zarr.json").read_text())
    except (OSError, ValueError) as e:
        return f"zarr.json: {e}"
    side = ARRAYS[name]
    got = meta.get("chunk_grid", {}).get("configuration", {}).get("chunk_shape")
    if got != [side, side]:
        return f"zarr.json chunk shape {got}, expected {[side, side]}"
    if any(c.get("name") == "sharding_indexed" for c in meta.get("codecs", [])):
        return "zarr.json still names sharding_indexed"
    files = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    files.discard("zarr.json")
    want = {f"c/{i}/{j}" for i in range(grid(name)[0]) for j in range(grid(name)[1])}
    if files != want:
        return (f"{len(want - files)} chunk files missing (e.g. {sorted(want - files)[:3]}), "
                f"{len(files - want)} unexpected (e.g. {sorted(files - want)[:3]})")
    data = expected(name)
    for rel in sorted(want):
        coords = tuple(int(c) for c in rel.split("/")[1:])
        if (dest / rel).read_bytes() != chunk_bytes(data, coords, side):
            return f"{rel}: bytes differ from the written data"
    return None


def check_dataset_copy(dest: Path, name: str) -> str | None:
    """DEST is a copy of dataset NAME in the unsharded view (row n's copy): a group zarr.json whose
    consolidated entry of the array shows the inner chunks and no sharding, and the array's
    directory as check_view_copy wants it; nothing else."""
    try:
        doc = json.loads((dest / "zarr.json").read_text())
    except (OSError, ValueError) as e:
        return f"zarr.json: {e}"
    if doc.get("node_type") != "group":
        return f"zarr.json: node_type {doc.get('node_type')!r}, expected group"
    entry = ((doc.get("consolidated_metadata") or {}).get("metadata") or {}).get(VAR)
    if not entry:
        return f"zarr.json: no consolidated entry for {VAR}"
    got = entry.get("chunk_grid", {}).get("configuration", {}).get("chunk_shape")
    if got != [ARRAYS[name]] * 2 or any(c.get("name") == "sharding_indexed" for c in entry.get("codecs", [])):
        return f"zarr.json: the consolidated entry of {VAR} is not unsharded ({got})"
    top = sorted(p.name for p in dest.iterdir())
    if top != sorted(["zarr.json", VAR]):
        return f"top level {top}, expected zarr.json and {VAR}"
    return check_view_copy(dest / VAR, name)


def check_raw_copy(dest: Path, src: Path) -> str | None:
    """DEST holds exactly the files of SRC (the stored array: zarr.json and shards), byte for byte."""
    want = {p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file()}
    got = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    if got != want:
        return f"files: {len(want - got)} missing {sorted(want - got)[:3]}, {len(got - want)} unexpected"
    for rel in sorted(want):
        if (dest / rel).read_bytes() != (src / rel).read_bytes():
            return f"{rel}: bytes differ"
    return None


def check_s3_copy(s3, prefix: str, local: Path) -> str | None:
    """The objects under PREFIX (boto3 client S3, straight to moto) are exactly the files of LOCAL,
    row n's unsharded copy: every ETag is the MD5 of the local file (moto computes it from the bytes
    it stored), and the metadata documents and every 16th chunk are read back and compared too."""
    want = {p.relative_to(local).as_posix(): p for p in local.rglob("*") if p.is_file()}
    got = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        got.update({o["Key"][len(prefix) + 1:]: o["ETag"].strip('"') for o in page.get("Contents", [])})
    if set(got) != set(want):
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        return f"objects: {len(missing)} missing {missing[:3]}, {len(extra)} unexpected {extra[:3]}"
    sample = set(sorted(want)[::16]) | {k for k in want if k.endswith("zarr.json")}
    for rel, path in sorted(want.items()):
        data = path.read_bytes()
        if "-" not in got[rel] and got[rel] != hashlib.md5(data).hexdigest():
            return f"{rel}: ETag {got[rel]} is not the MD5 of the local copy's file"
        if rel in sample and s3.get_object(Bucket=BUCKET, Key=f"{prefix}/{rel}")["Body"].read() != data:
            return f"{rel}: bytes differ from the local copy's"
    return None


def delete_prefix(s3, prefix: str) -> None:
    """Every object under PREFIX deleted (moto keeps them in memory)."""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=BUCKET, Delete={"Objects": keys, "Quiet": True})


def check_array(a, name: str) -> str | None:
    a = np.asarray(a)
    if a.shape != SHAPE or a.dtype != np.uint16:
        return f"read {a.shape} {a.dtype}, expected {SHAPE} uint16"
    if not np.array_equal(a, expected(name)):
        return f"{int((a != expected(name)).sum())} values differ from the written data"
    return None


# ---------------------------------------------------------------------------------------------
# the Python clients (run in a fresh process each: no connection or cache survives a row)


def client(kind: str, name: str, target: str, dest: str | None) -> dict:
    import warnings

    warnings.filterwarnings("ignore")
    if kind == "zarr":
        import zarr

        if "://" in target:
            import aiohttp  # noqa: F401 - imported before the clock starts, as a long-running
            import fsspec.implementations.http  # noqa: F401 - program would have it already
        t0 = now()
        a = zarr.open_group(target, mode="r")[VAR][...]
        secs = now() - t0
        return {"seconds": secs, "check": check_array(a, name)}
    if kind == "xarray":
        import xarray as xr
        import zarr  # noqa: F401

        if "://" in target:
            import aiohttp  # noqa: F401
            import fsspec.implementations.http  # noqa: F401
        t0 = now()
        ds = xr.open_zarr(target).load()
        secs = now() - t0
        return {"seconds": secs, "check": check_array(ds[VAR].values, name)}
    if kind == "tensorstore":
        import tensorstore as ts
        import zarr

        u = urllib.parse.urlsplit(target)
        src_spec = {"driver": "zarr3", "kvstore": {"driver": "http", "base_url": f"{u.scheme}://{u.netloc}",
                                                   "path": u.path.rstrip("/") + "/"}}
        t0 = now()
        src = ts.open(src_spec, read=True).result()
        inner = list(src.chunk_layout.read_chunk.shape)
        meta = {"shape": list(src.shape), "data_type": "uint16",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": inner}},
                "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "dimension_names": list(src.domain.labels)}
        dst = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": dest}, "metadata": meta},
                      create=True, delete_existing=True).result()
        dst.write(src).result()
        secs = now() - t0
        doc = json.loads((Path(dest) / "zarr.json").read_text())
        err = None
        if any(c.get("name") == "sharding_indexed" for c in doc["codecs"]) or inner != [ARRAYS[name]] * 2:
            err = f"the copy is not unsharded with inner chunks: {doc['codecs']}, {inner}"
        return {"seconds": secs, "check": err or check_array(zarr.open_array(dest, mode="r")[...], name)}
    raise SystemExit(f"bench_latency.py client: unknown kind {kind}")


# ---------------------------------------------------------------------------------------------
# processes this run owns: every pid is written to WORK/pids so the shell wrapper's trap can end
# them too (it checks that a pid's command line names WORK first)


class BenchError(Exception):
    pass


class Proxy:
    """A zarrfs-delay-proxy in front of a server on 127.0.0.1, with its log of client sends."""

    def __init__(self, bench: "Bench", name: str, upstream: int, rtt: float):
        self.rtt = rtt
        self.log = bench.work / f"proxy-{name}-{rtt:g}ms.log"
        port_file = bench.work / f"proxy-{name}-{rtt:g}ms.port"
        port_file.unlink(missing_ok=True)
        err = open(bench.work / f"proxy-{name}-{rtt:g}ms.err", "w")
        self.proc = subprocess.Popen(
            [bench.proxy_bin, "--upstream", f"127.0.0.1:{upstream}", "--rtt-ms", f"{rtt:g}",
             "--log", str(self.log), "--port-file", str(port_file)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        bench.own(self.proc.pid)
        deadline = now() + 10
        while not port_file.exists():
            if self.proc.poll() is not None or now() > deadline:
                self.close()
                raise BenchError(f"zarrfs-delay-proxy did not start (see {err.name})")
            time.sleep(0.02)
        self.port = int(port_file.read_text())

    def mark(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def sends(self, since: int) -> list:
        with open(self.log, "rb") as f:
            f.seek(since)
            lines = f.read().split(b"\n")
        out = []
        for line in lines:
            parts = line.split()
            if len(parts) == 3:
                out.append((int(parts[0]) / 1e6, int(parts[1])))
        return out

    def count(self, since: int) -> dict:
        """Sends (about one per request), connections and waves (round trips of wall time:
        sends more than half a round trip after the previous one start a new wave; none at 0 ms)."""
        s = self.sends(since)
        times = sorted(t for t, _ in s)
        gap = self.rtt / 2000
        waves = sum(1 for i, t in enumerate(times) if i == 0 or t - times[i - 1] > gap) if self.rtt else None
        return {"sends": len(s), "conns": len({c for _, c in s}), "waves": waves}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Mount:
    def __init__(self, mnt: Path, pid: int | None, seconds: float):
        self.mnt, self.pid, self.seconds = mnt, pid, seconds


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def find_daemon(url: str, mnt: Path) -> int | None:
    want = ["mount", url, str(mnt)]
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            args = [a.decode(errors="replace") for a in (p / "cmdline").read_bytes().split(b"\0")]
        except OSError:
            continue
        if any(args[i:i + 3] == want for i in range(len(args) - 2)):
            return int(p.name)
    return None


# ---------------------------------------------------------------------------------------------
# the benchmark


class Processes:
    """What both latency benches do with processes: the pids they own (ended by the shell
    wrapper's trap), page caches dropped, commands that must succeed, mounts waited for.
    Needs `self.work`, `self.mnt` and `self.can_drop`."""

    def own(self, pid: int) -> None:
        with open(self.work / "pids", "a") as f:
            f.write(f"{pid}\n")

    def drop_caches(self) -> None:
        os.sync()
        if self.can_drop:
            try:
                Path("/proc/sys/vm/drop_caches").write_text("3\n")
            except OSError:
                self.can_drop = False

    def sh(self, cmd: list, env: dict | None = None, timeout: float = TIMEOUT, **kw) -> subprocess.CompletedProcess:
        r = subprocess.run(cmd, env=env, capture_output=True, timeout=timeout, **kw)
        if r.returncode != 0:
            err = r.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise BenchError(f"{shlex.join(map(str, cmd[:4]))}... exit {r.returncode}: {' | '.join(err)}")
        return r

    def mount_daemon(self, cmd: list, env: dict, url: str) -> tuple:
        """Run the mount command CMD of URL at self.mnt and wait until it is live: (the
        daemon's pid or None, seconds)."""
        t0 = now()
        self.sh(cmd, env=env, timeout=120)
        deadline = now() + 15
        while not os.path.ismount(self.mnt):
            if now() > deadline:
                raise BenchError(f"zarrfs mount {url}: {self.mnt} not mounted after 15 s")
            time.sleep(0.02)
        secs = now() - t0
        pid = find_daemon(url, self.mnt)
        if pid:
            self.own(pid)
        return pid, secs


class Bench(Processes):
    def __init__(self, work: Path, bin_path: str, proxy_path: str):
        self.work = work
        self.bin_dir = work / "bin"
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        # Measure one binary throughout, even if a build replaces the original meanwhile.
        self.bin = str(self.bin_dir / "zarrfs")
        self.proxy_bin = str(self.bin_dir / "zarrfs-delay-proxy")
        shutil.copy2(bin_path, self.bin)
        shutil.copy2(proxy_path, self.proxy_bin)
        self.bin_shown, self.proxy_shown = bin_path, proxy_path
        self.fx = work / "fx" / "root"
        self.mnt = work / "mnt"
        self.mnt.mkdir(exist_ok=True)
        self.copies = work / "copy"
        self.copies.mkdir(exist_ok=True)
        self.results = work / "results.jsonl"
        self.results.write_text("")
        self.runs = int(os.environ.get("RUNS", "1"))
        # row n is a floor: its fastest of a few runs (cheap: no network, no mount)
        self.floor_runs = int(os.environ.get("FLOOR_RUNS", "") or max(self.runs, 2))
        self.cap = float(os.environ.get("CLIENT_CAP", "120"))
        self.latencies = [float(x) for x in os.environ.get("LATENCIES", "0 20 50").split()]
        self.sizes = os.environ.get("SIZES", "small large").split()
        for s in self.sizes:
            if s not in ("small", "large"):
                raise BenchError(f"SIZES: {s!r} is not small or large")
        self.rows = set(os.environ.get("ROWS", "abcdefghknxy"))
        self.native_cp = {}  # chunk size -> row n's cp -r record: row k's reference
        self.native_copy = {}  # chunk size -> row n's checked unsharded copy: what row y uploads
        self.s3_dests = 0  # S3 destinations of row y so far: each run writes to a fresh prefix
        self.s3_port = int(os.environ.get("LAT_S3_PORT", "9290"))
        self.http_port = int(os.environ.get("LAT_HTTP_PORT", "9291"))
        self.servers_env = dict(
            os.environ, ZARRFS_SERVERS_DIR=str(work / "servers"), ZARRFS_S3_PORT=str(self.s3_port),
            ZARRFS_HTTP_PORT=str(self.http_port), ZARRFS_HTTP_STATIC_PORT=str(self.http_port + 1),
            ZARRFS_HTTP_PLAIN_PORT=str(self.http_port + 2), ZARRFS_HTTP_BARE_PORT=str(self.http_port + 3),
            ZARRFS_HTTPS_PORT=str(self.http_port + 4))
        self.started = []  # servers.sh names started
        self.proxies = []
        self.mounts = []
        self.rclone = str(REPO / ".venv" / "bin" / "rclone")
        (work / "rclone.conf").write_text("")
        self.can_drop = os.access("/proc/sys/vm/drop_caches", os.W_OK)
        self.s3_env = {}
        self.failures = 0

    def mount(self, url: str, env: dict | None = None, args: tuple = ()) -> Mount:
        if os.path.ismount(self.mnt):
            raise BenchError(f"{self.mnt} is still mounted")
        cmd = [self.bin, "mount", url, str(self.mnt), "--read-only",
               "--log-file", str(self.work / "zarrfs.log"), *args]
        full_env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "zarrfs=warn"), **(env or {}))
        pid, secs = self.mount_daemon(cmd, full_env, url)
        m = Mount(self.mnt, pid, secs)
        self.mounts.append(m)
        return m

    def unmount(self, m: Mount) -> None:
        r = subprocess.run([self.bin, "unmount", str(m.mnt)], capture_output=True, timeout=60)
        if r.returncode != 0 and os.path.ismount(m.mnt):
            subprocess.run(["fusermount3", "-u", str(m.mnt)], capture_output=True, timeout=60)
        if m.pid:
            end_daemon(m.pid)
        if m in self.mounts:
            self.mounts.remove(m)

    def cleanup(self) -> None:
        for m in list(self.mounts):
            try:
                self.unmount(m)
            except Exception as e:  # noqa: BLE001 - best effort, keep cleaning
                say(f"cleanup: unmount {m.mnt}: {e}")
        if os.path.ismount(self.mnt):
            subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True)
        for p in self.proxies:
            p.close()
        self.proxies = []
        for name in reversed(self.started):
            subprocess.run(["bash", str(SCRIPTS / "servers.sh"), "stop", name], env=self.servers_env,
                           capture_output=True, timeout=60)
        self.started = []

    # -- servers

    def start_servers(self) -> None:
        servers = SCRIPTS / "servers.sh"
        for name in ("http", "s3"):
            if not self.rows & set("hy") and name == "s3":
                continue
            say(f"starting {name} (servers.sh, private ports, {self.work / 'servers'})")
            self.started.append(name)
            self.sh(["bash", str(servers), "start", name], env=self.servers_env, timeout=180)
        www = self.work / "servers" / "http" / "www" / "zarrfs"
        www.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(www / PREFIX, ignore_errors=True)
        self.sh(["cp", "-al", str(self.fx), str(www / PREFIX)])
        if "s3" in self.started:
            out = self.sh(["bash", str(servers), "env", "s3"], env=self.servers_env).stdout.decode()
            for word in shlex.split(out.strip().removeprefix("export ")):
                k, _, v = word.partition("=")
                self.s3_env[k] = v
            say(f"seeding s3://zarrfs/{PREFIX} (moto on port {self.s3_port})")
            self.sh([sys.executable, str(SCRIPTS / "seed_remote.py"), "s3", str(self.fx), PREFIX],
                    env=self.servers_env)

    # -- recording

    def record(self, rec: dict) -> None:
        with open(self.results, "a") as f:
            f.write(json.dumps(rec) + "\n")
        z, ref = rec.get("z"), rec.get("ref")
        parts = [lat_name(rec["lat"]), LABEL.get(rec.get("size"), "-"), rec["what"]]
        if z:
            parts.append(f"{z.get('seconds', float('nan')):.3f} s")
        if ref:
            parts.append(f"vs {rec['ref_what']} {ref.get('seconds', float('nan')):.3f} s")
        for side in (z, ref):
            if side and side.get("check") not in (None, "ok"):
                parts.append(f"CHECK: {side['check']}")
        say("  " + ", ".join(parts))

    # -- measuring

    def measure(self, proxy: Proxy | None, op, check=None, mount: tuple | None = None,
                runs: int | None = None, before=None) -> dict:
        """RUNS (or runs) times: (a fresh mount of mount=(url, env, args)), drop the page cache, run op
        (timed; it may return {"seconds": ...} measured inside a client), then check; the
        fastest run with its counters (the proxy's, if the op goes through one)."""
        best = None
        for _ in range(runs or self.runs):
            rec: dict = {}
            if before:
                before()
            m = self.mount(*mount) if mount else None
            try:
                self.drop_caches()
                s0 = mount_stats(m.mnt) if m else None
                mk = proxy.mark() if proxy else 0
                t0 = now()
                out = op(m) or {}
                rec["seconds"] = out.pop("seconds", now() - t0)
                if proxy:
                    rec.update(proxy.count(mk))
                if m:
                    s1 = mount_stats(m.mnt)
                    rec["delta"] = {k: v - s0.get(k, 0) for k, v in s1.items() if isinstance(v, (int, float))}
                    rec["peak"] = s1.get("requests_in_flight_peak", "-")
                    rec["mount_s"] = m.seconds
            finally:
                if m:
                    self.unmount(m)
            err = out.pop("check", None)
            err = (check(out) if check else None) or err
            rec.update(out)
            rec["check"] = err or "ok"
            if err:
                self.failures += 1
                say(f"  a run failed its check: {err}")
            if best is None or rec["seconds"] < best["seconds"]:
                best = rec
        return best

    def row(self, lat: float | None, size: str | None, rid: str, what: str, z=None, ref_what: str = "", ref=None,
            note: str = "", floor: str | None = None) -> dict:
        """Measure and record one row (lat None: row n, no network); z and ref are thunks returning
        measure() records; floor names the client whose row n is this row's floor (the n row
        itself names it too). A row that fails is recorded with the error and the run goes on."""
        rec = {"lat": lat, "size": size, "row": rid, "what": what, "ref_what": ref_what, "note": note}
        if floor:
            rec["floor"] = floor
        for side, fn in (("z", z), ("ref", ref)):
            if fn is None:
                continue
            try:
                rec[side] = fn() if callable(fn) else fn
            except Exception as e:  # noqa: BLE001 - one broken row must not lose the others
                self.failures += 1
                rec[side] = {"error": f"{type(e).__name__}: {e}"[:300], "check": "error"}
                say(f"{lat_name(lat)} {rid} {what}: {rec[side]['error']}")
                for m in list(self.mounts):
                    self.unmount(m)
        self.record(rec)
        return rec

    # -- workloads

    def fresh(self, name: str) -> Path:
        d = self.copies / name
        shutil.rmtree(d, ignore_errors=True)
        return d

    def cp_view(self, array: str, dest: Path):
        def op(m):
            self.sh(["cp", "-r", str(m.mnt / array / VAR), str(dest)])
        return op

    def rclone_cmd(self, src: str, dest: Path, extra: list) -> list:
        return [self.rclone, "copy", src, str(dest), *RCLONE_FLAGS, "--config", str(self.work / "rclone.conf"), *extra]

    def rclone_env(self) -> dict:
        env = dict(os.environ)
        env.pop("AWS_CA_BUNDLE", None)  # rclone on S3 fails with it set (TESTING.md)
        return env

    def py_client(self, kind: str, size: str, target: str, dest: Path | None = None) -> dict:
        cmd = [sys.executable, str(Path(__file__).resolve()), "client", kind, size, target]
        if dest:
            cmd.append(str(dest))
        try:
            out = self.sh(cmd, timeout=self.cap).stdout.decode().strip().splitlines()[-1]
        except subprocess.TimeoutExpired:
            say(f"  {kind} reading {target}: stopped at CLIENT_CAP={self.cap:g} s")
            return {"seconds": self.cap, "capped": True}
        return json.loads(out)

    def view_and_done(self, dest: Path, size: str):
        def check(_out):
            err = check_view_copy(dest, size)
            shutil.rmtree(dest, ignore_errors=True)
            return err
        return check

    def native_rows(self) -> None:
        """Row n, once per chunk size before the latency loops: an unsharded copy of the view's
        dataset on local disk (cp -r from a fresh mount at 0 ms, checked), then the clients of rows
        b, c and d on it with no network and no FUSE: their own cost per file, a floor for those
        rows. Row y alone makes only the copy (it uploads it)."""
        say("no network, no FUSE: unsharded copies of the view on local disk (made through a 0 ms mount)")
        proxy = Proxy(self, "copy", self.http_port, 0)
        self.proxies.append(proxy)
        mount = (f"http://127.0.0.1:{proxy.port}/zarrfs/{PREFIX}", None, ())
        native = self.work / "native"
        native.mkdir(exist_ok=True)
        try:
            for size in self.sizes:
                copy = native / size
                shutil.rmtree(copy, ignore_errors=True)

                def make(m, copy=copy, size=size):
                    shutil.rmtree(copy, ignore_errors=True)  # each run copies anew (RUNS > 1)
                    self.sh(["cp", "-r", str(m.mnt / size), str(copy)])

                made = self.row(None, size, "n", f"the copy: cp -r view/{size} (the dataset) at 0 ms",
                                note=f"on {fs_type(native)}",
                                z=lambda make=make, copy=copy, size=size: self.measure(
                                    proxy, make, lambda _o: check_dataset_copy(copy, size), mount))
                if made["z"].get("check") != "ok":
                    say(f"  no floor rows and no row y for {LABEL[size]}: the copy is not right")
                    continue
                self.native_copy[size] = copy
                if "n" in self.rows:
                    self.floor_rows(size, copy / VAR)
        finally:
            proxy.close()
            self.proxies.remove(proxy)

    def floor_rows(self, size: str, arr: Path) -> None:
        dest = self.fresh(f"cp-native-{size}")

        def cp(_m):
            self.sh(["cp", "-r", str(arr), str(dest)])

        native = self.row(None, size, "n", "cp -r copy", floor="cp",
                          z=lambda: self.measure(None, cp, self.view_and_done(dest, size), runs=self.floor_runs))
        self.native_cp[size] = native.get("z")
        # cp copies a file between two places of one filesystem in the kernel (copy_file_range),
        # but from any other filesystem (a FUSE mount among them) through a buffer of its own:
        # read, then write. The same cp with copy_file_range refused is the floor of row k.
        shim = self.no_copy_file_range()
        if shim:
            rw_dest = self.fresh(f"cp-native-rw-{size}")
            rw_env = dict(os.environ, LD_PRELOAD=str(shim))

            def cp_rw(_m):
                self.sh(["cp", "-r", str(arr), str(rw_dest)], env=rw_env)

            self.row(None, size, "n", "cp -r copy, read + write", floor="cp-rw",
                     note="copy_file_range refused, as for a copy from another filesystem",
                     z=lambda: self.measure(None, cp_rw, self.view_and_done(rw_dest, size), runs=self.floor_runs))
        rdest = self.fresh(f"rclone-native-{size}")

        def rclone_local(_m):
            self.sh(self.rclone_cmd(str(arr), rdest, []))

        self.row(None, size, "n", "rclone copy copy/ (16 transfers)", floor="rclone",
                 z=lambda: self.measure(None, rclone_local, self.view_and_done(rdest, size), runs=self.floor_runs))
        for kind in ("zarr", "xarray"):
            self.row(None, size, "n", f"{kind} of the copy", floor=kind,
                     z=lambda kind=kind: self.measure(None, lambda _m: self.py_client(kind, size, str(arr.parent)),
                                                     runs=self.floor_runs))

    def no_copy_file_range(self) -> Path | None:
        """A preload library under which copy_file_range fails with EXDEV, as it does between two
        filesystems, so that cp copies through its buffer (built with cc once; None without cc)."""
        lib = self.work / "no_copy_file_range.so"
        if lib.exists():
            return lib
        cc = shutil.which("cc") or shutil.which("gcc")
        if not cc:
            say("no C compiler: no read + write floor row for row k")
            return None
        src = self.work / "no_copy_file_range.c"
        src.write_text("#define _GNU_SOURCE\n#include <errno.h>\n#include <sys/types.h>\n"
                       "ssize_t copy_file_range(int a, off_t *b, int c, off_t *d, size_t e, unsigned f)"
                       " { (void)a; (void)b; (void)c; (void)d; (void)e; (void)f; errno = EXDEV; return -1; }\n")
        self.sh([cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(src)])
        return lib

    def run_latency(self, lat: float) -> None:
        say(f"round trip {lat:g} ms")
        dav = Proxy(self, "dav", self.http_port, lat)
        static = Proxy(self, "static", self.http_port + 1, lat)
        self.proxies += [dav, static]
        s3 = None
        if "s3" in self.started:
            s3 = Proxy(self, "s3", self.s3_port, lat)
            self.proxies.append(s3)
        root_url = f"http://127.0.0.1:{dav.port}/zarrfs/{PREFIX}"
        http_mount = (root_url, None, ())
        for size in self.sizes:
            src = self.fx / size / VAR
            ref_a = ts = None
            if self.rows & set("abcx"):
                dest = self.fresh(f"rclone-http-{size}")
                url = f"http://127.0.0.1:{static.port}/zarrfs/{PREFIX}/{size}/{VAR}/"

                def rclone_http(_m, dest=dest, url=url):
                    self.sh(self.rclone_cmd(":http:", dest, ["--http-url", url]), env=self.rclone_env())

                def raw_check(_o, dest=dest, src=src):
                    err = check_raw_copy(dest, src)
                    shutil.rmtree(dest, ignore_errors=True)
                    return err

                ref_a = self.row(lat, size, "a", "rclone copy :http: (raw shards)",
                                 z=lambda: self.measure(static, rclone_http, raw_check))["z"]
            b = None
            if "b" in self.rows or "e" in self.rows:
                dest = self.fresh(f"cp-{size}")
                b = self.row(lat, size, "b", "cp -r view", ref_what="rclone raw (a)", ref=ref_a, floor="cp",
                             z=lambda: self.measure(dav, self.cp_view(size, dest), self.view_and_done(dest, size),
                                                    http_mount))["z"]
            if "c" in self.rows:
                dest = self.fresh(f"rclone-view-{size}")

                def rclone_view(m, dest=dest):
                    self.sh(self.rclone_cmd(str(m.mnt / size / VAR), dest, []))

                self.row(lat, size, "c", "rclone copy view/ (16 transfers)", ref_what="rclone raw (a)", ref=ref_a,
                         floor="rclone",
                         z=lambda: self.measure(dav, rclone_view, self.view_and_done(dest, size), http_mount))
            if "d" in self.rows:
                for kind in ("zarr", "xarray"):
                    direct = f"{root_url}/{size}"
                    self.row(lat, size, "d", f"{kind} via view", ref_what=f"{kind} over HTTP", floor=kind,
                             ref=lambda kind=kind, direct=direct: self.measure(
                                 dav, lambda _m: self.py_client(kind, size, direct)),
                             z=lambda kind=kind: self.measure(
                                 dav, lambda m: self.py_client(kind, size, str(m.mnt / size)), mount=http_mount))
            if "e" in self.rows:
                dest = self.fresh(f"ts-{size}")

                def ts_check(_o, dest=dest):
                    shutil.rmtree(dest, ignore_errors=True)

                def ts_unshard(_m, dest=dest, size=size):
                    return self.py_client("tensorstore", size, f"{root_url}/{size}/{VAR}", dest)

                ts = self.row(lat, size, "e", "cp -r view (b)", z=b, ref_what="tensorstore HTTP -> unsharded",
                              ref=lambda: self.measure(dav, ts_unshard, ts_check))["ref"]
            if "k" in self.rows:
                self.disk_cache_rows(lat, size, dav, root_url)
            if "x" in self.rows:
                self.local_copy_rows(lat, size, dav, f"{root_url}/{size}", ref_a, ts)
            if "y" in self.rows and s3 is not None:
                self.s3_dest_row(lat, size, dav, s3, f"{root_url}/{size}")
            if "f" in self.rows:
                self.row(lat, size, "f", "cat first chunk",
                         z=lambda: self.measure(dav, self.cat_first(size), mount=http_mount))
        if "g" in self.rows:
            self.listing_rows(lat, dav, http_mount, "g", "")
        if s3 is not None and "h" in self.rows:
            self.s3_rows(lat, s3)
        for p in (dav, static, s3):
            if p:
                p.close()
                self.proxies.remove(p)

    def zarrfs_copy(self, source: str, dest: str, env: dict | None = None) -> str:
        """`zarrfs copy SOURCE DEST --unshard`: its summary line (files, bytes, rate), DEST left out."""
        out = self.sh([self.bin, "copy", source, dest, "--unshard"], env=env).stdout.decode().strip()
        return re.sub(r" to \S+", "", out.splitlines()[-1]) if out else ""

    def local_copy_rows(self, lat: float, size: str, proxy: Proxy, url: str, ref_a: dict | None,
                        ts: dict | None) -> None:
        """Row x: zarrfs copy of the dataset at URL to local disk, vs rclone's raw copy (row a), and
        again vs tensorstore's unshard (row e) when this run measured it (issue 26's two aims)."""
        dest = self.fresh(f"zarrfs-copy-{size}")

        def zcopy(_m):
            return {"out": self.zarrfs_copy(url, str(dest))}

        def zcopy_check(_o):
            err = check_dataset_copy(dest, size)
            shutil.rmtree(dest, ignore_errors=True)
            return err

        x = self.row(lat, size, "x", "zarrfs copy --unshard (the dataset)", ref_what="rclone raw (a)",
                     ref=ref_a, z=lambda: self.measure(proxy, zcopy, zcopy_check))["z"]
        if ts is not None:
            self.row(lat, size, "x", "zarrfs copy --unshard (x)", z=x, ref_what="tensorstore unshard (e)", ref=ts)

    def s3_dest_row(self, lat: float, size: str, dav: Proxy, s3: Proxy, url: str) -> None:
        """Row y: zarrfs copy of the dataset at URL (HTTP) to a fresh prefix of the S3 server, vs
        rclone uploading row n's unsharded copy of it (16 transfers) to another; both behind the
        proxy at the same round trip, each copy checked against row n's and then deleted. The
        proxy counts are the S3 side's (what both do); zarrfs's HTTP reads go in its notes."""
        import boto3

        local = self.native_copy.get(size)
        if local is None:
            say(f"  no row y for {LABEL[size]}: no checked unsharded copy from row n")
            return
        endpoint = f"http://127.0.0.1:{s3.port}"
        direct = boto3.client("s3", endpoint_url=self.s3_env["AWS_ENDPOINT_URL"],
                              aws_access_key_id=self.s3_env["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=self.s3_env["AWS_SECRET_ACCESS_KEY"],
                              region_name=self.s3_env.get("AWS_REGION", "us-east-1"))
        last = {}  # tool -> the prefix its latest run wrote, for the check

        def prefix(tool: str) -> str:
            self.s3_dests += 1
            last[tool] = f"copies/{self.s3_dests}-{tool}-{lat:g}ms-{size}"
            return last[tool]

        def checked(tool: str):
            def check(_o):
                try:
                    return check_s3_copy(direct, last[tool], local)
                finally:
                    delete_prefix(direct, last[tool])
            return check

        zenv = {**os.environ, **self.s3_env, "AWS_ENDPOINT_URL": endpoint}

        def zcopy(_m):
            mk, t0 = dav.mark(), now()
            summary = self.zarrfs_copy(url, f"s3://{BUCKET}/{prefix('zarrfs')}", zenv)
            secs, src = now() - t0, dav.count(mk)
            waves = "" if src["waves"] is None else f", {src['waves']} waves"
            return {"seconds": secs, "out": f"HTTP source: ~{src['sends']} reqs{waves}; {summary}"}

        # an rclone remote from the environment (RCLONE_CONFIG_<NAME>_...), as a user would set one
        renv = dict(self.rclone_env(), RCLONE_CONFIG_LATS3_TYPE="s3", RCLONE_CONFIG_LATS3_PROVIDER="Other",
                    RCLONE_CONFIG_LATS3_ENDPOINT=endpoint,
                    RCLONE_CONFIG_LATS3_REGION=self.s3_env.get("AWS_REGION", "us-east-1"),
                    RCLONE_CONFIG_LATS3_ACCESS_KEY_ID=self.s3_env["AWS_ACCESS_KEY_ID"],
                    RCLONE_CONFIG_LATS3_SECRET_ACCESS_KEY=self.s3_env["AWS_SECRET_ACCESS_KEY"])

        def upload(_m):
            self.sh(self.rclone_cmd(str(local), f"lats3:{BUCKET}/{prefix('rclone')}", []), env=renv)

        self.row(lat, size, "y", "zarrfs copy --unshard HTTP -> S3", ref_what="rclone upload of n's copy",
                 ref=lambda: self.measure(s3, upload, checked("rclone")),
                 z=lambda: self.measure(s3, zcopy, checked("zarrfs")))

    def disk_cache_rows(self, lat: float, size: str, proxy: Proxy, url: str) -> None:
        """Row k: cp -r of the view from a remount with the same --cache as a mount that copied it
        once (untimed), page cache dropped, against the native cp -r of row n: within the metadata
        TTL (nothing to confirm), and after it (each shard's version confirmed by a HEAD)."""
        for ttl, what in (("60", "within the TTL"), ("1", "TTL passed")):
            cache = self.work / "disk-cache" / f"{lat_name(lat)}-{size}-{ttl}"
            shutil.rmtree(cache, ignore_errors=True)
            args = ("--cache", str(cache), "--metadata-ttl", ttl)
            dest = self.fresh(f"cp-cache-{size}")

            def fill():
                m = self.mount(url, None, args)
                try:
                    self.cp_view(size, dest)(m)
                finally:
                    self.unmount(m)
                err = self.view_and_done(dest, size)(None)
                if err:
                    raise BenchError(f"filling the disk cache: {err}")
                # A second past the TTL before each run: every version is confirmed again.
                wait = (lambda: time.sleep(1.1)) if ttl == "1" else None
                return self.measure(proxy, self.cp_view(size, dest), self.view_and_done(dest, size),
                                    (url, None, args), before=wait)

            self.row(lat, size, "k", f"cp -r view, remount --cache ({what})", ref_what="native cp -r (n)",
                     ref=self.native_cp.get(size), floor="cp-rw", z=fill)

    def cat_first(self, size: str):
        def op(m):
            r = self.sh(["cat", str(m.mnt / size / VAR / "c" / "0" / "0")])
            want = chunk_bytes(expected(size)[:ARRAYS[size], :ARRAYS[size]], (0, 0), ARRAYS[size])
            return {"check": None if r.stdout == want else f"c/0/0: {len(r.stdout)} bytes, wrong"}
        return op

    def listing_rows(self, lat: float, proxy: Proxy, mount: tuple, rid: str, tag: str) -> None:
        entries = all_view_entries()
        n_files = sum(1 for e in entries if e.endswith("zarr.json")) + sum(math.prod(grid(n)) for n in ARRAYS)

        def find(m):
            r = self.sh(["find", str(m.mnt)])
            got = {Path(p).relative_to(m.mnt).as_posix() for p in r.stdout.decode().splitlines()}
            got.discard(".")
            err = None
            if got != entries:
                err = (f"find: {len(entries - got)} missing {sorted(entries - got)[:2]}, "
                       f"{len(got - entries)} unexpected {sorted(got - entries)[:2]}")
            return {"check": err, "out": f"{len(got)} entries"}

        def ls_lr(m):
            r = self.sh(["ls", "-lR", str(m.mnt)])
            n = sum(1 for line in r.stdout.decode().splitlines() if line.startswith("-"))
            return {"check": None if n == n_files else f"ls -lR: {n} files, expected {n_files}",
                    "out": f"{n} files"}

        def du(m):
            r = self.sh(["du", "-s", str(m.mnt)])
            return {"check": None, "out": f"{r.stdout.decode().split()[0]} KiB"}

        for what, op in (("find", find), ("ls -lR", ls_lr), ("du -s", du)):
            self.row(lat, None, rid, f"{tag}{what} (48 shards)", z=lambda op=op: self.measure(proxy, op, mount=mount))

    def s3_rows(self, lat: float, proxy: Proxy) -> None:
        endpoint = f"http://127.0.0.1:{proxy.port}"
        env = dict(self.s3_env, AWS_ENDPOINT_URL=endpoint)
        mount = (f"s3://zarrfs/{PREFIX}", env, ("--endpoint-url", endpoint))
        for size in self.sizes:
            src = self.fx / size / VAR
            dest = self.fresh(f"rclone-s3-{size}")
            rcl_env = dict(self.rclone_env(), **env)
            flags = ["--s3-provider", "Other", "--s3-endpoint", endpoint, "--s3-region", env.get("AWS_REGION", "us-east-1"),
                     "--s3-access-key-id", env.get("AWS_ACCESS_KEY_ID", ""),
                     "--s3-secret-access-key", env.get("AWS_SECRET_ACCESS_KEY", "")]

            def rclone_s3(_m, dest=dest, size=size, flags=flags, rcl_env=rcl_env):
                self.sh(self.rclone_cmd(f":s3:zarrfs/{PREFIX}/{size}/{VAR}", dest, flags), env=rcl_env)

            def raw_check(_o, dest=dest, src=src):
                err = check_raw_copy(dest, src)
                shutil.rmtree(dest, ignore_errors=True)
                return err

            ref = self.row(lat, size, "h", "S3: rclone copy :s3: (raw shards)",
                           z=lambda: self.measure(proxy, rclone_s3, raw_check))["z"]
            cdest = self.fresh(f"cp-s3-{size}")
            self.row(lat, size, "h", "S3: cp -r view", ref_what="rclone raw S3", ref=ref,
                     z=lambda: self.measure(proxy, self.cp_view(size, cdest), self.view_and_done(cdest, size), mount))
            self.row(lat, size, "h", "S3: cat first chunk",
                     z=lambda: self.measure(proxy, self.cat_first(size), mount=mount))
        self.listing_rows(lat, proxy, mount, "h", "S3: ")


def run(work: Path, bin_path: str, proxy_path: str) -> int:
    t_start = now()
    load0 = Path("/proc/loadavg").read_text().split()[:3]
    b = Bench(work, bin_path, proxy_path)

    exit_on_signals()
    try:
        say(f"work directory {work}")
        say("writing the fixture (xarray to_zarr, zarr_format=3, 3 arrays x 16 shards)")
        write_fixture(b.fx)
        b.start_servers()
        if b.rows & set("ny"):  # row y uploads row n's copy
            b.native_rows()
        for lat in b.latencies:
            b.run_latency(lat)
    finally:
        b.cleanup()
    print(header(b, load0, now() - t_start))
    table(str(b.results))
    if b.failures:
        say(f"{b.failures} measurement(s) failed or copied wrong data: see the check column")
        return 1
    return 0


def end_daemon(pid: int) -> None:
    """Wait up to 30 s for an unmounted daemon to exit, then kill it. Looked at every 5 ms: the
    write bench times the unmount up to the daemon's end, which a coarser poll would round up
    by as much as a journal's whole teardown."""
    deadline = now() + 30
    while alive(pid) and now() < deadline:
        time.sleep(0.005)
    if alive(pid):
        say(f"zarrfs {pid} still running 30 s after unmount; killing it")
        os.kill(pid, signal.SIGKILL)


def exit_on_signals() -> None:
    """SIGTERM and SIGHUP end the run through its `finally` (its mounts, proxies and servers)."""
    def on_term(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)


def identity_lines(title: str, bin_path: str, bin_shown: str, built_mtime: float, proxy_shown: str) -> list:
    """The first lines of a latency bench's header: which binary (version, digest, when built),
    which source tree, which proxy."""
    version = subprocess.run([bin_path, "--version"], capture_output=True, text=True).stdout.strip()
    digest = hashlib.sha256(Path(bin_path).read_bytes()).hexdigest()[:12]
    built = time.strftime("%Y-%m-%d %H:%M", time.localtime(built_mtime))
    head = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%h %cd", "--date=format:%Y-%m-%d %H:%M"],
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return [f"{title}: {version}, binary {bin_shown} (sha256 {digest}, built {built}),",
            f"  source tree at {head}{' (with uncommitted changes)' if dirty else ''}; proxy {proxy_shown}"]


def machine_line(can_drop: bool, load0: list, total: float, runs: int) -> str:
    """The start of a latency bench's header line about the machine and the run."""
    load1 = Path("/proc/loadavg").read_text().split()[:3]
    caches = "dropped before each measurement" if can_drop else "NOT dropped (no permission)"
    return (f"  {os.cpu_count()} cores, page caches {caches}, load avg {' '.join(load0)} at start,"
            f" {' '.join(load1)} at end; total {total:.0f} s; RUNS={runs} (fastest kept),")


def header(b: Bench, load0: list, total: float) -> str:
    rclone = subprocess.run([b.rclone, "version"], capture_output=True, text=True).stdout.split("\n")[0]
    vers = subprocess.run([sys.executable, "-c", "import zarr, xarray, tensorstore, fsspec, importlib.metadata as m; "
                           "print('zarr', zarr.__version__, 'xarray', xarray.__version__, 'tensorstore', "
                           "m.version('tensorstore'), 'fsspec', fsspec.__version__)"],
                          capture_output=True, text=True).stdout.strip()
    built = Path(b.bin_shown).stat().st_mtime
    return "\n".join([
        "",
        *identity_lines("zarrfs latency benchmark", b.bin, b.bin_shown, built, b.proxy_shown),
        machine_line(b.can_drop, load0, total, b.runs) +
        f" LATENCIES=\"{' '.join(f'{x:g}' for x in b.latencies)}\" SIZES=\"{' '.join(b.sizes)}\""
        f" ROWS={''.join(sorted(b.rows))} CLIENT_CAP={b.cap:g}{f' FLOOR_RUNS={b.floor_runs}' if 'n' in b.rows else ''}",
        f"  {rclone}; {vers}; servers on 127.0.0.1: nginx (WebDAV port {b.http_port}, index pages {b.http_port + 1}),"
        f" moto {'(port ' + str(b.s3_port) + ')' if b.s3_env else 'not used'}",
        "  fixture: 3 xarray datasets (zarr_format=3, consolidated), 4096x4096 uint16 random, 16 shards x 2 MiB"
        " each, no compression; 8 KiB = 64x64 inner chunks (4096 files), 128 KiB = 256x256 (256 files)",
    ])


# ---------------------------------------------------------------------------------------------
# the table


def fmt_table(head: list, rows: list) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(head)]
    out = ["  ".join(f"{h:>{w}}" if i else f"{h:<{w}}" for i, (h, w) in enumerate(zip(head, widths)))]
    for r in rows:
        out.append("  ".join(f"{str(c):>{w}}" if i else f"{str(c):<{w}}" for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(out)


def secs(side) -> str:
    if not side:
        return ""
    if "error" in side:
        return "ERROR"
    if side.get("capped"):
        return f">{side['seconds']:.0f}"
    return f"{side['seconds']:.2f}" if side["seconds"] >= 0.1 else f"{side['seconds']:.3f}"


def notes_of(*sides) -> str:
    checks = [s["check"] for s in sides if s.get("check") and s["check"] != "ok"]
    checks += [s["error"] for s in sides if s.get("error")]
    return "; ".join(checks) if checks else ("ok" if any(sides) else "")


def table(results: str) -> None:
    all_recs = [json.loads(line) for line in open(results) if line.strip()]
    native = [r for r in all_recs if r["lat"] is None]
    recs = [r for r in all_recs if r["lat"] is not None]
    # row n's seconds per (chunk size, client): the floor of the rows b, c, d naming that client
    floors = {(r["size"], r["floor"]): r["z"] for r in native
              if r.get("floor") and r.get("z") and "error" not in r["z"] and r["z"].get("check") == "ok"}
    if native:
        rows = []
        for r in native:
            z = r.get("z") or {}
            notes = notes_of(z)
            if "mount_s" in z:
                notes += f" ({r['note'] + ', ' if r.get('note') else ''}mount {z['mount_s']:.2f} s)"
            rows.append([r["row"], LABEL.get(r.get("size"), "all"), r["what"], secs(z), notes])
        print("\n== no network, no FUSE: the unsharded copy on local disk " + "=" * 42)
        print(fmt_table(["row", "chunks", "client on the copy", "s", "check / notes"], rows))
    head = ["row", "chunks", "zarrfs", "s", "reference", "ref s", "ratio"] + (["vs floor"] if floors else []) + [
        "reqs", "GET", "GET MiB", "peak", "conns", "waves", "ref reqs", "ref conns", "ref waves", "mount s", "check / notes"]
    for lat in dict.fromkeys(r["lat"] for r in recs):
        rows = []
        for r in (r for r in recs if r["lat"] == lat):
            z, ref = r.get("z") or {}, r.get("ref") or {}
            if r["row"] == "a" or r["what"].startswith("S3: rclone"):
                # a reference of its own: shown in the reference columns
                z, ref = {}, r.get("z") or {}
                what, ref_what = "", r["what"]
            else:
                what, ref_what = r["what"], r.get("ref_what", "")
            d = z.get("delta") or {}
            ratio = ""
            if z.get("seconds") and ref.get("seconds") and "error" not in z and "error" not in ref:
                bound = ">=" if ref.get("capped") else "<=" if z.get("capped") else ""
                ratio = f"{bound}{ref['seconds'] / z['seconds']:.2f}x"
            vs_floor = ""
            fl = floors.get((r.get("size"), r.get("floor")))
            if fl and fl.get("seconds") and z.get("seconds") and "error" not in z:
                vs_floor = f"{'>=' if z.get('capped') else ''}{z['seconds'] / fl['seconds']:.2f}x"
            notes = notes_of(z, ref)
            if z.get("out"):
                notes += f" ({z['out']})"
            waves = lambda s: "" if not s else ("-" if s.get("waves") is None else s["waves"])  # noqa: E731
            # no mount, no daemon counters (x, y): the sends through the proxy instead
            reqs = d.get("http_requests", f"~{z['sends']}" if "sends" in z and "delta" not in z else "-")
            rows.append([
                r["row"], LABEL.get(r.get("size"), "all"), what, secs(z), ref_what, secs(ref), ratio,
                *([vs_floor] if floors else []),
                reqs if z else "", d.get("get", "-") if z else "",
                f"{d['get_bytes'] / 2**20:.1f}" if "get_bytes" in d else ("-" if z else ""),
                z.get("peak", "-") if z else "", z.get("conns", "") if z else "", waves(z),
                f"~{ref['sends']}" if "sends" in ref else "", ref.get("conns", ""), waves(ref),
                f"{z['mount_s']:.2f}" if "mount_s" in z else "", notes])
        print(f"\n== round trip {lat:g} ms " + "=" * 60)
        print(fmt_table(head, rows))
    print("""
ratio: reference seconds / zarrfs seconds (>1: zarrfs is faster). Every zarrfs row is a fresh mount
(--read-only, default options) of the URL through the delaying proxy, page cache dropped; its time
excludes the mount (mount s). reqs, GET, GET MiB: the daemon's http_requests, get and get_bytes
during the row ("~N" for x and y, which mount nothing: the sends through the proxy); peak:
requests_in_flight_peak since the mount ("-": not in this binary). conns:
connections the daemon opened (each costs a handshake round trip; moto closes every connection
after one request, so S3 rows pay it per request, rclone's too). waves: round trips of wall time
in the proxy's log (sends > rtt/2 apart start a new wave; "-" at 0 ms).
ref reqs, ref conns: the reference's sends (~ requests) and connections through the proxy (a PUT
may take more than one send; moto's one request per connection makes conns the request count on
S3). ">N": a Python client stopped at
CLIENT_CAP s. a: rclone copy :http: of the stored shards (16 transfers, index pages); b: cp -r of
the array from the view; c: rclone copy (local, 16 transfers) from the view; d: zarr.open_group /
xr.open_zarr(...).load() (defaults, a fresh process each, time = open + read) of the mount vs of
the URL (fsspec HTTP); e: tensorstore reading the sharded array over HTTP and writing an unsharded
copy, vs b; f: cat of c/0/0 right after the mount; g: a cold find / ls -lR / du -s of the root
(3 arrays, 48 shards, 5,376 chunk files); h: the same over S3 (moto); k: cp -r of the array from
a remount with the --cache of a mount that copied it once, within the metadata TTL (60 s) and after
it (1 s: each shard confirmed by a HEAD), vs row n's native cp -r of the copy on local disk (its
"vs floor": vs row n's read + write cp, which is how cp copies from any other filesystem); x:
`zarrfs copy URL DEST --unshard` of the dataset (no mount; the whole command, to local disk), vs a
(aim >= 0.9x) and, in a second line when e ran, vs e's tensorstore unshard of the array (aim >= 3x);
y: `zarrfs copy URL s3://... --unshard` of the dataset from HTTP to a fresh prefix of moto (both
behind the proxy) vs rclone uploading row n's unsharded copy of it (16 transfers, fresh prefix; aim
>= 0.8x), both checked against that copy (object set, ETag = MD5 of every file, every 16th read
back); its proxy columns are the S3 side's, its notes give the HTTP source's and zarrfs's summary.
n: no network, no FUSE: the clients of b, c and d alone on an unsharded copy of the view on local
disk (made once per chunk size before the latency rows: cp -r of the view's dataset from a fresh
mount at 0 ms, checked, its time shown for information); page cache dropped, the fastest of
FLOOR_RUNS runs kept: cp -r of the array, the same cp with copy_file_range refused (an LD_PRELOAD
library built with cc: cp then reads and writes through its buffer, as it does from any other
filesystem, a FUSE mount included, where one filesystem lets it copy in the kernel), rclone copy of
it (local, 16 transfers, as c),
zarr.open_group(copy)["data"][...] and xr.open_zarr(copy).load() (a fresh process each, values
checked). That is the client's own cost per file (open, read, write: 4096 files at 8 KiB, 256 at
128 KiB), independent of zarrfs: a floor for rows b, c and d, which nothing serving one file per
chunk can beat, while the references of a and d read the 16 shards and can. vs floor: zarrfs
seconds / row n seconds of the same client and chunk size (b: cp -r, c: rclone, d: zarr, xarray;
1.00x = at the floor); the ratio column stays vs each row's reference.""")


def run_command(prog: str, args: list, run) -> int:
    """The `run WORK --bin B --proxy P` subcommand of a latency bench (this one's and
    bench_write_latency.py's): `run(work, bin, proxy)`, a BenchError said and exit status 1."""
    import argparse

    p = argparse.ArgumentParser(prog=f"{prog} run")
    p.add_argument("work", type=Path)
    p.add_argument("--bin", required=True)
    p.add_argument("--proxy", required=True)
    a = p.parse_args(args)
    try:
        return run(a.work.resolve(), a.bin, a.proxy)
    except BenchError as e:
        say(f"error: {e}")
        return 1


def main(argv: list) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "run":
        return run_command("bench_latency.py", args, run)
    if cmd == "client":
        print(json.dumps(client(args[0], args[1], args[2], args[3] if len(args) > 3 else None)))
        return 0
    if cmd == "table":
        table(args[0])
        return 0
    print(f"bench_latency.py: unknown subcommand {cmd}", file=sys.stderr)
    return 2

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
