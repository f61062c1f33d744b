#!/usr/bin/env python3
"""Helper of bench/bench_write_latency.sh: writing into an S3 mount at cloud round trips, the
write journal (the default) against commit at close, write-back in memory and rclone uploading
the same data, side by side in one table (see bench_write_latency.sh for what is measured).

Subcommands:
    run WORK --bin ZARRFS --proxy PROXY
        the whole benchmark (env: LATENCIES, SIZES, ROWS, RUNS, CAP, NO_JOURNAL_LATENCIES,
        WLAT_S3_PORT, WLAT_S3FS_PATH); results in WORK/results.jsonl, the table on stdout,
        progress on stderr
    client xarray SIZE TARGET WORK [ENDPOINT]
        xarray writing the fixture's data into the dataset at TARGET (a directory, or an s3://
        URL with ENDPOINT): to_zarr(mode="a") of a new sharded variable holding the first half
        of the rows, then to_zarr(append_dim="y") of the second half; prints a JSON record
        {"seconds": both writes, "first": ..., "append": ...}
    check URL SIZE LAYOUT ENDPOINT WORK [--xarray]
        read the array at URL (s3://zarrfs/PREFIX/data) with zarr-python directly from S3 and
        compare it with the fixture's data; LAYOUT sharded or unsharded; --xarray: also open
        the dataset above it with xr.open_zarr (consolidated metadata) and compare; prints
        {"check": null or what is wrong, "how": ...}
    table RESULTS                 print the table of a results file again

The data is bench_latency.py's: 4096x4096 uint16 random (seeded), shards of 1024x1024 (16, 2 MiB
each), no compression, inner chunks 64x64 (8 KiB, 4096 files) or 256x256 (128 KiB, 256 files).
"""
from __future__ import annotations

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
from bench_latency import (  # noqa: E402
    ARRAYS, LABEL, RCLONE_FLAGS, SHAPE, SHARD, VAR, BenchError, Processes, Proxy, alive, end_daemon, expected, exit_on_signals,
    identity_lines, machine_line, now, run_command, say,
)
from mount_stats import mount_stats  # noqa: E402

SIZES = ("small", "large")
ALL_ROWS = ("ref-up", "ref-files", "disk-sync", "journal", "no-journal", "write-back", "xarray")
BUCKET = "zarrfs"
TIMEOUT = 900  # any step that takes longer is taken for a hang: recorded as an error, with the daemon's log
COUNTERS = ("shard_commits", "set", "set_bytes", "get", "get_bytes", "erase", "http_requests", "fuse_flushes")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
REQUEST = re.compile(r'"([A-Z]+) (\S+) HTTP/[0-9.]+" (\d{3})')
ZARRFS_ROWS = {
    "journal": ((), "cp -r, defaults (journal)"),
    "no-journal": (("--no-journal",), "cp -r, --no-journal"),
    "write-back": (("--no-journal", "--write-back-delay", "5"), "cp -r, --no-journal --write-back-delay 5"),
}


def side(size: str) -> int:
    return ARRAYS[size]


def grid(size: str) -> tuple:
    return tuple(math.ceil(n / side(size)) for n in SHAPE)


def shard_keys() -> set:
    return {f"{VAR}/c/{i}/{j}" for i in range(SHAPE[0] // SHARD[0]) for j in range(SHAPE[1] // SHARD[1])}


def expected_keys(layout: str, size: str) -> set:
    """The objects a row must leave under its prefix."""
    if layout == "unsharded":
        gy, gx = grid(size)
        return {f"{VAR}/zarr.json"} | {f"{VAR}/c/{i}/{j}" for i in range(gy) for j in range(gx)}
    keys = {f"{VAR}/zarr.json"} | shard_keys()
    if layout == "sharded-group":
        keys.add("zarr.json")
    return keys


def mib(n) -> str:
    return f"{n / 2**20:.1f}"


def s3_options(endpoint: str) -> dict:
    return {"key": os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
            "secret": os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
            "endpoint_url": endpoint, "client_kwargs": {"region_name": os.environ.get("AWS_REGION", "us-east-1")}}


# ---------------------------------------------------------------------------------------------
# the fixture (local, under WORK/fx): for each size
#   sharded/SIZE/data     the array as stored (zarr.json + 16 shards), uploaded by ref-up
#   unsharded/SIZE/data   the same array unsharded (zarr.json + one file per inner chunk): the
#                         local copy the zarrfs rows cp -r from, uploaded by ref-files
#   empty/SIZE            a group holding the sharded array's zarr.json and no chunk: seeded
#                         under a fresh prefix for every zarrfs cp row
#   emptyds               an empty xarray dataset (group, consolidated): seeded for the xarray rows


def create(path: Path, size: str, sharded: bool, group: bool):
    import zarr

    kw = dict(shape=SHAPE, chunks=(side(size),) * 2, dtype="uint16", compressors=None, fill_value=0,
              dimension_names=("y", "x"))
    if sharded:
        kw["shards"] = SHARD
    if group:
        return zarr.create_group(str(path), zarr_format=3).create_array(VAR, **kw)
    return zarr.create_array(str(path / VAR), zarr_format=3, **kw)


def write_fixture(fx: Path, sizes: list) -> None:
    import warnings

    import xarray as xr

    warnings.filterwarnings("ignore")
    shutil.rmtree(fx, ignore_errors=True)
    for size in sizes:
        data = expected(size)
        create(fx / "sharded" / size, size, sharded=True, group=False)[...] = data
        create(fx / "unsharded" / size, size, sharded=False, group=False)[...] = data
        create(fx / "empty" / size, size, sharded=True, group=True)
        # the sharded array's zarr.json must be the one the empty store declares
        a = json.loads((fx / "sharded" / size / VAR / "zarr.json").read_text())
        b = json.loads((fx / "empty" / size / VAR / "zarr.json").read_text())
        if a != b:
            raise BenchError(f"fixture {size}: the sharded and the empty array's zarr.json differ")
        for layout, d in (("unsharded", fx / "unsharded" / size), ("sharded", fx / "sharded" / size)):
            files = {p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file()}
            if files != expected_keys(layout, size):
                raise BenchError(f"fixture {size} {layout}: {len(files)} files, expected {len(expected_keys(layout, size))}")
    xr.Dataset(attrs={"description": "zarrfs write latency benchmark"}).to_zarr(
        str(fx / "emptyds"), zarr_format=3, consolidated=True)


def tree_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------------
# the Python clients (a fresh process each)


def client_xarray(size: str, target: str, endpoint: str | None) -> dict:
    import warnings

    warnings.filterwarnings("ignore")
    import xarray as xr
    import zarr  # noqa: F401

    so = None
    if target.startswith("s3://"):
        import s3fs  # noqa: F401 - imported before the clock starts, as a long-running program would have it
        so = s3_options(endpoint)
    data = expected(size)
    half = SHAPE[0] // 2
    first = xr.Dataset({VAR: (("y", "x"), data[:half])})
    second = xr.Dataset({VAR: (("y", "x"), data[half:])})
    enc = {VAR: {"chunks": (side(size),) * 2, "shards": SHARD, "compressors": None}}
    t0 = now()
    first.to_zarr(target, mode="a", encoding=enc, storage_options=so)
    t1 = now()
    second.to_zarr(target, mode="a", append_dim="y", storage_options=so)
    t2 = now()
    return {"seconds": t2 - t0, "first": t1 - t0, "append": t2 - t1}


def check(url: str, size: str, layout: str, endpoint: str, with_xarray: bool) -> dict:
    """zarr-python (and xarray) reading the array at URL directly from S3, compared with the data."""
    import warnings

    warnings.filterwarnings("ignore")
    import zarr

    tmp = None
    try:
        try:
            import s3fs  # noqa: F401

            how = "zarr-python over s3fs"
            target, so = url, s3_options(endpoint)
        except ImportError:
            # no s3fs: the objects fetched with boto3 (still directly from S3), read from disk
            import seed_remote as SR

            how = "zarr-python on the objects fetched with boto3 (no s3fs)"
            prefix = urllib.parse.urlsplit(url).path.strip("/").rsplit("/", 1)[0]
            tmp = Path(os.environ.get("TMPDIR", "/var/tmp")) / f"wlat-check-{os.getpid()}"
            for key in SR.list_objects("s3", prefix):
                (tmp / key).parent.mkdir(parents=True, exist_ok=True)
                (tmp / key).write_bytes(SR.get_object("s3", f"{prefix}/{key}"))
            target, so = str(tmp / VAR), None
        a = zarr.open_array(target, mode="r", storage_options=so)
        want_chunks = (side(size),) * 2
        if layout == "unsharded":
            if a.shards is not None or a.chunks != want_chunks:
                return {"check": f"stored as shards {a.shards} chunks {a.chunks}, expected unsharded {want_chunks}", "how": how}
        elif a.shards != SHARD or a.chunks != want_chunks:
            return {"check": f"stored as shards {a.shards} chunks {a.chunks}, expected {SHARD} of {want_chunks}", "how": how}
        got = a[...]
        data = expected(size)
        if got.shape != SHAPE or got.dtype != np.uint16:
            return {"check": f"read {got.shape} {got.dtype}, expected {SHAPE} uint16", "how": how}
        if not np.array_equal(got, data):
            bad = np.argwhere(got != data)
            chunks = sorted({tuple(int(c) // side(size) for c in b) for b in bad[:100000]})
            return {"check": f"{len(bad)} values differ (inner chunks e.g. {chunks[:4]} of {len(chunks)}+)", "how": how}
        if with_xarray:
            import xarray as xr

            ds = xr.open_zarr(target.rsplit("/", 1)[0], storage_options=so, consolidated=True)
            if not np.array_equal(ds[VAR].values, data):
                return {"check": "xr.open_zarr (consolidated) reads other values", "how": how}
            how += " + xr.open_zarr"
        return {"check": None, "how": how}
    except Exception as e:  # noqa: BLE001 - a store that cannot be read is a finding, not a crash
        return {"check": f"cannot read: {type(e).__name__}: {e}"[:300], "how": "zarr-python"}
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# the benchmark


class Mount:
    def __init__(self, mnt: Path, url: str, pid: int | None, seconds: float, log: Path, journal: Path):
        self.mnt, self.url, self.pid, self.seconds, self.log, self.journal = mnt, url, pid, seconds, log, journal


class WBench(Processes):
    def __init__(self, work: Path, bin_path: str, proxy_path: str):
        self.work = work
        bin_dir = work / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        # Measure one binary throughout, even if a build replaces the original meanwhile.
        self.bin = str(bin_dir / "zarrfs")
        self.proxy_bin = str(bin_dir / "zarrfs-delay-proxy")
        shutil.copy2(bin_path, self.bin)
        shutil.copy2(proxy_path, self.proxy_bin)
        self.bin_shown, self.proxy_shown = bin_path, proxy_path
        self.bin_built = Path(bin_path).stat().st_mtime  # now: a build during the run replaces it
        self.fx = work / "fx"
        self.mnt = work / "mnt"
        self.mnt.mkdir(exist_ok=True)
        self.logs = work / "logs"
        self.logs.mkdir(exist_ok=True)
        # The journal's default directory is under $XDG_CACHE_HOME: the work directory's, so that
        # the mounts keep their default settings and nothing is left in ~/.cache.
        self.xdg = work / "xdg-cache"
        self.xdg.mkdir(exist_ok=True)
        self.results = work / "results.jsonl"
        self.results.write_text("")
        self.runs = int(os.environ.get("RUNS") or "1")
        self.cap = float(os.environ.get("CAP") or "120")
        self.latencies = [float(x) for x in (os.environ.get("LATENCIES") or "0 20 50").split()]
        self.nj_latencies = [float(x) for x in (os.environ.get("NO_JOURNAL_LATENCIES") or "0").split()]
        self.sizes = (os.environ.get("SIZES") or "small large").split()
        for s in self.sizes:
            if s not in SIZES:
                raise BenchError(f"SIZES: {s!r} is not small or large")
        self.rows = (os.environ.get("ROWS") or " ".join(ALL_ROWS)).replace(",", " ").split()
        for r in self.rows:
            if r not in ALL_ROWS:
                raise BenchError(f"ROWS: {r!r} is not one of {', '.join(ALL_ROWS)}")
        self.s3_port = int(os.environ.get("WLAT_S3_PORT") or "9390")
        self.s3fs_path = os.environ.get("WLAT_S3FS_PATH", "")
        self.servers_env = dict(os.environ, ZARRFS_SERVERS_DIR=str(work / "servers"), ZARRFS_S3_PORT=str(self.s3_port))
        # seed_remote.py (imported below) reads the port at each call
        os.environ["ZARRFS_S3_PORT"] = str(self.s3_port)
        os.environ["ZARRFS_SERVERS_DIR"] = str(work / "servers")
        self.moto_log = work / "servers" / "s3" / "server.log"
        self.direct = f"http://127.0.0.1:{self.s3_port}"
        self.started = False
        self.proxies = []
        self.mounts = []
        self.rclone = str(REPO / ".venv" / "bin" / "rclone")
        (work / "rclone.conf").write_text("")
        self.can_drop = os.access("/proc/sys/vm/drop_caches", os.W_OK)
        self.s3_env = {}
        self.failures = 0
        self.seq = 0
        self.run_id = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        self.child = None  # the cp or rclone running now (its own process group)

    # -- processes (own, drop_caches, sh, mount_daemon: bench_latency.Processes)

    def run_capped(self, cmd: list, cap: float, env: dict | None = None) -> tuple[bool, float]:
        """Run CMD (its own process group) for at most CAP seconds: (finished, seconds)."""
        t0 = now()
        p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, start_new_session=True)
        self.own(p.pid)
        self.child = p
        try:
            _, err = p.communicate(timeout=cap)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            return False, now() - t0
        finally:
            self.child = None
        if p.returncode != 0:
            lines = err.decode(errors="replace").strip().splitlines()
            raise BenchError(f"{shlex.join(map(str, cmd[:3]))}... exit {p.returncode}: "
                             f"{' | '.join(lines[:2])}{f' (+{len(lines) - 2} more lines)' if len(lines) > 2 else ''}")
        return True, now() - t0

    def new_prefix(self, lat: float, size: str, row: str) -> str:
        self.seq += 1
        return f"wlat/{self.run_id}/{lat:g}ms-{size}-{row}-{self.seq}"

    def mount(self, prefix: str, proxy: Proxy, args: tuple, tag: str) -> Mount:
        if os.path.ismount(self.mnt):
            raise BenchError(f"{self.mnt} is still mounted")
        url = f"s3://{BUCKET}/{prefix}"
        log = self.logs / f"{tag}.log"
        endpoint = f"http://127.0.0.1:{proxy.port}"
        cmd = [self.bin, "mount", url, str(self.mnt), "--endpoint-url", endpoint, "--log-file", str(log), *args]
        env = {**os.environ, **self.s3_env, "AWS_ENDPOINT_URL": endpoint, "XDG_CACHE_HOME": str(self.xdg),
               "RUST_LOG": os.environ.get("RUST_LOG", "zarrfs=info")}
        pid, secs = self.mount_daemon(cmd, env, url)
        m = Mount(self.mnt, url, pid, secs, log, self.xdg / "zarrfs" / "journal")
        self.mounts.append(m)
        return m

    def unmount(self, m: Mount, timeout: float = TIMEOUT) -> str:
        """`zarrfs unmount` (what it printed); then waits for the daemon to end."""
        out = ""
        try:
            r = subprocess.run([self.bin, "unmount", str(m.mnt)], capture_output=True, timeout=timeout)
            out = r.stderr.decode(errors="replace").strip()
            if r.returncode != 0:
                raise BenchError(f"zarrfs unmount failed (exit {r.returncode}): {out[-300:]}")
        finally:
            if m in self.mounts:
                self.mounts.remove(m)
            self.reap(m)
        return out

    def reap(self, m: Mount) -> None:
        """Make sure M is unmounted and its daemon ended (after a failure too)."""
        if os.path.ismount(m.mnt):
            subprocess.run(["fusermount3", "-u", str(m.mnt)], capture_output=True, timeout=60)
        if os.path.ismount(m.mnt):
            subprocess.run(["fusermount3", "-uz", str(m.mnt)], capture_output=True, timeout=60)
        if m.pid:
            end_daemon(m.pid)
        if m in self.mounts:
            self.mounts.remove(m)

    def cleanup(self) -> None:
        if self.child is not None and self.child.poll() is None:  # interrupted: its writer first
            os.killpg(self.child.pid, signal.SIGKILL)
            self.child.wait()
        for m in list(self.mounts):
            # interrupted (or failed) with a mount up: its prefix is thrown away, so its daemon is
            # not left committing what its journal holds through the proxy; then the mount goes
            if m.pid and alive(m.pid):
                os.kill(m.pid, signal.SIGKILL)
            try:
                self.reap(m)
            except Exception as e:  # noqa: BLE001 - best effort, keep cleaning
                say(f"cleanup: unmount {m.mnt}: {e}")
        for p in self.proxies:
            p.close()
        self.proxies = []
        if self.started:
            subprocess.run(["bash", str(SCRIPTS / "servers.sh"), "stop", "s3"], env=self.servers_env,
                           capture_output=True, timeout=60)
            self.started = False

    # -- the server and what it saw

    def start_server(self) -> None:
        servers = SCRIPTS / "servers.sh"
        say(f"starting moto (servers.sh, port {self.s3_port}, {self.work / 'servers'})")
        self.started = True
        self.sh(["bash", str(servers), "start", "s3"], env=self.servers_env, timeout=180)
        out = self.sh(["bash", str(servers), "env", "s3"], env=self.servers_env).stdout.decode()
        for word in shlex.split(out.strip().removeprefix("export ")):
            k, _, v = word.partition("=")
            self.s3_env[k] = v

    def moto_mark(self) -> int:
        return self.moto_log.stat().st_size if self.moto_log.exists() else 0

    def moto_puts(self, since: int, prefix: str) -> int:
        """PUT requests moto logged after byte SINCE of its log for keys under PREFIX."""
        time.sleep(0.2)  # its log line follows its answer
        with open(self.moto_log, "rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
        n = 0
        want = f"/{BUCKET}/{prefix.strip('/')}/"
        for line in text.splitlines():
            m = REQUEST.search(ANSI.sub("", line))
            if m and m.group(1) == "PUT" and urllib.parse.unquote(urllib.parse.urlsplit(m.group(2)).path).startswith(want):
                n += 1
        return n

    def seed(self, local: Path, prefix: str) -> None:
        import seed_remote as SR

        SR.upload_tree("s3", local, prefix)

    def objects(self, prefix: str) -> dict:
        import seed_remote as SR

        return SR.list_objects("s3", prefix)

    def forget(self, prefix: str) -> None:
        """Delete a row's objects once checked (moto keeps everything in memory)."""
        import seed_remote as SR

        try:
            SR.delete_prefix("s3", prefix)
        except Exception as e:  # noqa: BLE001
            say(f"  could not delete s3://{BUCKET}/{prefix}: {e}")

    def verify(self, prefix: str, size: str, layout: str, with_xarray: bool = False) -> tuple[str | None, int]:
        """(what is wrong or None, bytes of the stored chunk objects): the objects under PREFIX are
        exactly the expected ones, and zarr-python reading them directly from S3 (moto's own port,
        no proxy, no zarrfs) gets the data."""
        objs = self.objects(prefix)
        want = expected_keys(layout, size)
        stored = sum(v for k, v in objs.items() if k.startswith(f"{VAR}/c/"))
        if set(objs) != want:
            missing, extra = sorted(want - set(objs)), sorted(set(objs) - want)
            return (f"objects: {len(missing)} missing {missing[:3]}, {len(extra)} unexpected {extra[:3]}", stored)
        env = {**os.environ, **self.s3_env}
        env.pop("AWS_ENDPOINT_URL", None)
        if self.s3fs_path:
            env["PYTHONPATH"] = self.s3fs_path + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [sys.executable, str(Path(__file__).resolve()), "check", f"s3://{BUCKET}/{prefix}/{VAR}", size,
               "unsharded" if layout == "unsharded" else "sharded", self.direct, str(self.work)]
        if with_xarray:
            cmd.append("--xarray")
        out = json.loads(self.sh(cmd, env=env, timeout=600).stdout.decode().strip().splitlines()[-1])
        return out["check"], stored

    # -- recording

    def record(self, rec: dict) -> None:
        with open(self.results, "a") as f:
            f.write(json.dumps(rec) + "\n")
        z, ref = rec.get("z") or {}, rec.get("ref") or {}
        parts = [f"{rec['lat']:g} ms", LABEL[rec["size"]], rec["row"]]
        if z:
            parts.append("ERROR" if "error" in z else f"{'>' if z.get('capped') else ''}{z['seconds']:.2f} s")
        if ref:
            parts.append(f"vs {rec.get('ref_what')} " + ("ERROR" if "error" in ref else f"{ref['seconds']:.2f} s"))
        for side_ in (z, ref):
            if side_.get("check") not in (None, "ok"):
                parts.append(f"CHECK: {side_['check']}")
            if side_.get("error"):
                parts.append(f"ERROR: {side_['error']}")
        say("  " + ", ".join(parts))

    def best(self, fn, runs: int | None = None) -> dict:
        """The fastest of RUNS runs of FN (each returns a record); a wrong or capped run ends the
        repeats and is kept (a wrong result must not hide behind a faster right one)."""
        best = None
        for _ in range(runs or self.runs):
            rec = fn()
            if rec.get("check") != "ok" or rec.get("capped"):
                return rec
            if best is None or rec["seconds"] < best["seconds"]:
                best = rec
        return best

    def row(self, lat: float, size: str, rid: str, what: str, z, ref_what: str = "", ref=None) -> dict:
        rec = {"lat": lat, "size": size, "row": rid, "what": what, "ref_what": ref_what}
        for side_, fn in (("z", z), ("ref", ref)):
            if fn is None:
                continue
            try:
                rec[side_] = fn() if callable(fn) else fn
            except Exception as e:  # noqa: BLE001 - one broken row must not lose the others
                rec[side_] = {"error": f"{type(e).__name__}: {e}"[:400], "check": "error"}
                say(f"{lat:g} ms {LABEL[size]} {rid}: {rec[side_]['error']}")
                for m in list(self.mounts):
                    self.diagnose(m, rec[side_])
                    self.reap(m)
            if callable(fn) and rec[side_].get("check") not in ("ok", None) and not rec[side_].get("capped"):
                self.failures += 1  # (a reference passed as a record was counted in its own row)
        self.record(rec)
        return rec

    def diagnose(self, m: Mount, into: dict) -> None:
        """After a failure or a hang with M still mounted: its counters (pending journal) and the
        last lines of its log."""
        try:
            r = subprocess.run([self.bin, "stats", "--json", str(m.mnt)], capture_output=True, timeout=10)
            s = json.loads(r.stdout)
            into["stats_at_failure"] = {k: s.get(k) for k in (*COUNTERS, "journal_pending_files", "journal_pending_bytes")}
        except Exception as e:  # noqa: BLE001
            into["stats_at_failure"] = f"zarrfs stats: {type(e).__name__}: {e}"[:200]
        into["log"] = str(m.log)
        into["log_tail"] = self.log_lines(m.log, 12, all_levels=True)
        say(f"    daemon stats: {into['stats_at_failure']}; its log: {m.log}")
        for line in into["log_tail"]:
            say(f"    log: {line}")

    def log_lines(self, log: Path, n: int = 5, all_levels: bool = False) -> list:
        try:
            lines = [ANSI.sub("", x) for x in log.read_text(errors="replace").splitlines()]
        except OSError:
            return []
        if not all_levels:
            lines = [x for x in lines if " WARN " in x or " ERROR " in x]
        return lines[-n:]

    # -- the rows

    def rclone_up(self, proxy: Proxy, lat: float, size: str, rid: str, layout: str) -> dict:
        """rclone copy of the local array (sharded or unsharded) to a fresh prefix, through the proxy."""
        local = self.fx / layout / size / VAR
        prefix = self.new_prefix(lat, size, rid)
        endpoint = f"http://127.0.0.1:{proxy.port}"
        env = {**os.environ, **self.s3_env}
        env.pop("AWS_CA_BUNDLE", None)  # rclone on S3 fails with it set (TESTING.md)
        env.pop("AWS_ENDPOINT_URL", None)
        cmd = [self.rclone, "copy", str(local), f":s3:{BUCKET}/{prefix}/{VAR}", *RCLONE_FLAGS,
               "--config", str(self.work / "rclone.conf"), "--s3-provider", "Other", "--s3-endpoint", endpoint,
               "--s3-region", self.s3_env.get("AWS_REGION", "us-east-1"),
               "--s3-access-key-id", self.s3_env.get("AWS_ACCESS_KEY_ID", ""),
               "--s3-secret-access-key", self.s3_env.get("AWS_SECRET_ACCESS_KEY", "")]
        self.drop_caches()
        mk = self.moto_mark()
        done, secs = self.run_capped(cmd, TIMEOUT, env=env)
        if not done:
            raise BenchError(f"rclone did not finish in {TIMEOUT} s")
        rec = {"seconds": secs, "moto_puts": self.moto_puts(mk, prefix), "put_bytes": tree_bytes(local)}
        err, stored = self.verify(prefix, size, layout)
        rec.update(check=err or "ok", stored_bytes=stored, objects=len(expected_keys(layout, size)))
        if not err:
            self.forget(prefix)
        return rec

    def disk_sync(self, size: str) -> dict:
        """The local unsharded chunk files copied to the work directory's disk (where the
        journal lives), each written and fdatasynced before the next is opened: what closing one
        file after another durably on this disk costs with no FUSE and no network, the floor
        under the journal row's cp."""
        src = self.fx / "unsharded" / size / VAR / "c"
        dst = self.work / "disk-sync"
        shutil.rmtree(dst, ignore_errors=True)
        self.drop_caches()
        files = 0
        t0 = time.monotonic()
        for d, _, names in os.walk(src):
            out = dst / os.path.relpath(d, src)
            out.mkdir(parents=True, exist_ok=True)
            for name in names:
                data = (Path(d) / name).read_bytes()
                with open(out / name, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fdatasync(f.fileno())
                files += 1
        secs = time.monotonic() - t0
        want = len(expected_keys("unsharded", size)) - 1  # the chunk files, not zarr.json
        same = files == want and tree_bytes(dst) == tree_bytes(src)
        shutil.rmtree(dst, ignore_errors=True)
        return {"seconds": secs, "files": files,
                "check": "ok" if same else f"copied {files} files of {want}, or other bytes"}

    def zarrfs_cp(self, proxy: Proxy, lat: float, size: str, rid: str, args: tuple, cap: float | None) -> dict:
        """A fresh prefix holding the empty sharded array; a fresh mount (ARGS) of it; cp -r of
        the local unsharded chunk files into its c/; the commit of everything pending and
        `zarrfs unmount`. Timed from cp's start to unmount's return."""
        prefix = self.new_prefix(lat, size, rid)
        self.seed(self.fx / "empty" / size, prefix)
        tag = prefix.rsplit("/", 1)[1]
        m = self.mount(prefix, proxy, args, tag)
        src = self.fx / "unsharded" / size / VAR / "c"
        dest = m.mnt / VAR / "c"
        rec: dict = {"mount_s": m.seconds}
        self.drop_caches()
        s0 = mount_stats(m.mnt)
        mk = self.moto_mark()
        t0 = now()
        done, _ = self.run_capped(["cp", "-r", f"{src}/.", f"{dest}/"], cap or TIMEOUT)
        if not done and not cap:
            raise BenchError(f"cp -r did not finish in {TIMEOUT} s (a hang?)")
        t_cp = now()
        s_cp = mount_stats(m.mnt)
        if done:
            # What `zarrfs unmount` does first (an fsync of the mount root: commit everything
            # pending), done here so that the counters below include those commits.
            r = subprocess.run(["sync", str(m.mnt)], capture_output=True, timeout=TIMEOUT)
            if r.returncode != 0:
                raise BenchError(f"sync {m.mnt} (commit of what is pending): {r.stderr.decode(errors='replace').strip()}")
            t_sync = now()
            s1 = mount_stats(m.mnt)
            out = self.unmount(m)
            t1 = now()
            rec.update(seconds=t1 - t0, cp_s=t_cp - t0, commit_s=t_sync - t_cp, unmount_s=t1 - t_sync)
            if "committing" in out:
                rec["unmount_said"] = out.splitlines()[0]
        else:
            s1 = s_cp
            rec.update(seconds=cap, capped=True)
            say(f"  {rid}: stopped at CAP={cap:g} s")
            self.unmount(m)
        rec["delta"] = {k: s1.get(k, 0) - s0.get(k, 0) for k in COUNTERS}
        rec["pending_after_cp"] = [s_cp.get("journal_pending_files"), s_cp.get("journal_pending_bytes")]
        rec["pending_at_stats"] = s1.get("journal_pending_files")
        rec["moto_puts"] = self.moto_puts(mk, prefix)
        rec["warnings"] = self.log_lines(m.log)
        left = [p.name for p in m.journal.rglob("*") if p.is_file() and p.name not in ("lock", "source")] \
            if m.journal.exists() else []
        if left:
            rec["journal_left"] = left[:5]
        if rec.get("capped"):
            objs = self.objects(prefix)
            rec["stored_bytes"] = sum(v for k, v in objs.items() if k.startswith(f"{VAR}/c/"))
            rec["check"] = (f"stopped at CAP: {rec['delta']['fuse_flushes']} of {math.prod(grid(size))} files closed, "
                            f"{sum(1 for k in objs if k.startswith(f'{VAR}/c/'))} shards stored")
            self.forget(prefix)
            return rec
        err, stored = self.verify(prefix, size, "sharded-group")
        rec.update(check=err or "ok", stored_bytes=stored)
        if err:
            say(f"  {rid} {LABEL[size]} at {lat:g} ms: WRONG STORE at s3://{BUCKET}/{prefix}: {err}")
            for line in self.log_lines(m.log, 12, all_levels=True):
                say(f"    log: {line}")
            rec["log_tail"] = self.log_lines(m.log, 12, all_levels=True)
        else:
            self.forget(prefix)
        return rec

    def py_client(self, size: str, target: str, endpoint: str | None = None) -> dict:
        cmd = [sys.executable, str(Path(__file__).resolve()), "client", "xarray", size, target, str(self.work)]
        env = dict(os.environ)
        if endpoint:
            cmd.append(endpoint)
            env.update(self.s3_env)
            env.pop("AWS_ENDPOINT_URL", None)
            if self.s3fs_path:
                env["PYTHONPATH"] = self.s3fs_path + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        r = subprocess.run(cmd, env=env, capture_output=True, timeout=TIMEOUT)
        if r.returncode != 0:
            err = r.stderr.decode(errors="replace").strip().splitlines()[-2:]
            raise BenchError(f"xarray client ({target}): exit {r.returncode}: {' | '.join(err)}")
        return json.loads(r.stdout.decode().strip().splitlines()[-1])

    def xarray_mount(self, proxy: Proxy, lat: float, size: str) -> dict:
        """xarray writing a new sharded variable and appending to it through a fresh mount (defaults)
        of a prefix holding an empty dataset; then the commit of what is pending and unmount."""
        prefix = self.new_prefix(lat, size, "xarray")
        self.seed(self.fx / "emptyds", prefix)
        tag = prefix.rsplit("/", 1)[1]
        m = self.mount(prefix, proxy, (), tag)
        rec: dict = {"mount_s": m.seconds}
        self.drop_caches()
        s0 = mount_stats(m.mnt)
        mk = self.moto_mark()
        out = self.py_client(size, str(m.mnt))
        t0 = now()
        s_w = mount_stats(m.mnt)
        r = subprocess.run(["sync", str(m.mnt)], capture_output=True, timeout=TIMEOUT)
        if r.returncode != 0:
            raise BenchError(f"sync {m.mnt}: {r.stderr.decode(errors='replace').strip()}")
        s1 = mount_stats(m.mnt)
        said = self.unmount(m)
        tail = now() - t0
        rec.update(seconds=out["seconds"] + tail, write_s=out["seconds"], first_s=out["first"],
                   append_s=out["append"], unmount_s=tail)
        if "committing" in said:
            rec["unmount_said"] = said.splitlines()[0]
        rec["delta"] = {k: s1.get(k, 0) - s0.get(k, 0) for k in COUNTERS}
        rec["pending_after_cp"] = [s_w.get("journal_pending_files"), s_w.get("journal_pending_bytes")]
        rec["moto_puts"] = self.moto_puts(mk, prefix)
        rec["warnings"] = self.log_lines(m.log)
        err, stored = self.verify(prefix, size, "sharded-group", with_xarray=True)
        rec.update(check=err or "ok", stored_bytes=stored)
        if err:
            rec["log_tail"] = self.log_lines(m.log, 12, all_levels=True)
        else:
            self.forget(prefix)
        return rec

    def xarray_direct(self, proxy: Proxy, lat: float, size: str) -> dict:
        if not self.s3fs_path and subprocess.run([sys.executable, "-c", "import s3fs"], capture_output=True).returncode:
            raise BenchError("s3fs unavailable (not installed, WLAT_S3FS_PATH unset)")
        prefix = self.new_prefix(lat, size, "xarray-direct")
        self.seed(self.fx / "emptyds", prefix)
        mk = self.moto_mark()
        out = self.py_client(size, f"s3://{BUCKET}/{prefix}", f"http://127.0.0.1:{proxy.port}")
        rec = {"seconds": out["seconds"], "first_s": out["first"], "append_s": out["append"],
               "moto_puts": self.moto_puts(mk, prefix)}
        err, stored = self.verify(prefix, size, "sharded-group", with_xarray=True)
        rec.update(check=err or "ok", stored_bytes=stored)
        if not err:
            self.forget(prefix)
        return rec

    def run_latency(self, lat: float) -> None:
        say(f"round trip {lat:g} ms")
        proxy = Proxy(self, "s3", self.s3_port, lat)
        self.proxies.append(proxy)
        try:
            for size in self.sizes:
                ref = None
                if "ref-up" in self.rows:
                    ref = self.row(lat, size, "ref-up", "rclone: the sharded store",
                                   z=lambda: self.best(lambda: self.rclone_up(proxy, lat, size, "ref-up", "sharded")))["z"]
                if "ref-files" in self.rows:
                    self.row(lat, size, "ref-files", "rclone: the unsharded files",
                             ref_what="ref-up" if ref else "", ref=ref,
                             z=lambda: self.best(lambda: self.rclone_up(proxy, lat, size, "ref-files", "unsharded")))
                if "disk-sync" in self.rows:
                    self.row(lat, size, "disk-sync", "local disk: a file at a time, fdatasync each",
                             ref_what="ref-up" if ref else "", ref=ref,
                             z=lambda: self.best(lambda: self.disk_sync(size)))
                for rid, (args, what) in ZARRFS_ROWS.items():
                    if rid not in self.rows:
                        continue
                    if rid == "no-journal" and lat not in self.nj_latencies:
                        continue
                    cap = self.cap if rid == "no-journal" else None
                    self.row(lat, size, rid, what, ref_what="ref-up" if ref else "", ref=ref,
                             z=lambda args=args, rid=rid, cap=cap: self.best(
                                 lambda: self.zarrfs_cp(proxy, lat, size, rid, args, cap)))
                if "xarray" in self.rows:
                    self.row(lat, size, "xarray", "xarray to_zarr + append",
                             ref_what="xarray direct (s3fs)",
                             ref=lambda: self.best(lambda: self.xarray_direct(proxy, lat, size)),
                             z=lambda: self.best(lambda: self.xarray_mount(proxy, lat, size)))
        finally:
            proxy.close()
            self.proxies.remove(proxy)


def run(work: Path, bin_path: str, proxy_path: str) -> int:
    t_start = now()
    load0 = Path("/proc/loadavg").read_text().split()[:3]
    b = WBench(work, bin_path, proxy_path)

    exit_on_signals()
    try:
        say(f"work directory {work}")
        say("writing the fixture (zarr-python: sharded, unsharded and empty arrays, 4096x4096 uint16)")
        write_fixture(b.fx, b.sizes)
        b.start_server()
        for lat in b.latencies:
            b.run_latency(lat)
    finally:
        b.cleanup()
    print(header(b, load0, now() - t_start))
    table(str(b.results))
    if b.failures:
        say(f"{b.failures} measurement(s) failed or left a wrong store: see the check column")
        return 1
    return 0


def header(b: WBench, load0: list, total: float) -> str:
    rclone = subprocess.run([b.rclone, "version"], capture_output=True, text=True).stdout.split("\n")[0]
    env = dict(os.environ)
    if b.s3fs_path:
        env["PYTHONPATH"] = b.s3fs_path
    vers = subprocess.run([sys.executable, "-c", "import zarr, xarray, importlib.metadata as m\n"
                           "try:\n import s3fs; s = 's3fs ' + s3fs.__version__\nexcept ImportError: s = 'no s3fs'\n"
                           "print('zarr', zarr.__version__, 'xarray', xarray.__version__, s, 'moto', m.version('moto'))"],
                          capture_output=True, text=True, env=env).stdout.strip()
    return "\n".join([
        "",
        *identity_lines("zarrfs write latency benchmark", b.bin, b.bin_shown, b.bin_built, b.proxy_shown),
        machine_line(b.can_drop, load0, total, b.runs) +
        f" LATENCIES=\"{' '.join(f'{x:g}' for x in b.latencies)}\" SIZES=\"{' '.join(b.sizes)}\" CAP={b.cap:g}"
        f" NO_JOURNAL_LATENCIES=\"{' '.join(f'{x:g}' for x in b.nj_latencies)}\"",
        f"  ROWS=\"{' '.join(b.rows)}\"",
        f"  {rclone}; {vers}; moto on 127.0.0.1:{b.s3_port} behind zarrfs-delay-proxy; journal in the default"
        f" directory under XDG_CACHE_HOME={b.xdg}",
        "  data: 4096x4096 uint16 random, 16 shards x 2 MiB, no compression; 8 KiB = 64x64 inner chunks (4096 files),"
        " 128 KiB = 256x256 (256 files)",
    ])


# ---------------------------------------------------------------------------------------------
# the table


def secs(side_) -> str:
    if not side_:
        return ""
    if "error" in side_:
        return "ERROR"
    if side_.get("capped"):
        return f">{side_['seconds']:.0f}"
    return f"{side_['seconds']:.2f}"


def notes_of(rec: dict) -> str:
    z, ref = rec.get("z") or {}, rec.get("ref") or {}
    out = []
    for name, s in (("", z), ("ref: ", ref)):
        if not s:
            continue
        if s.get("error"):
            out.append(f"{name}ERROR {s['error']}")
        elif s.get("check") and (name == "" or s["check"] != "ok"):
            out.append(f"{name}{s['check']}")
    if rec["row"] in ZARRFS_ROWS and z.get("cp_s") is not None:
        pend = z.get("pending_after_cp") or [None, None]
        out.append(f"cp {z['cp_s']:.2f} + commit {z['commit_s']:.2f} + unmount {z['unmount_s']:.2f} s"
                   + (f", {pend[0]} files pending after cp" if pend[0] else ""))
    if rec["row"] == "xarray":
        if z.get("write_s") is not None:
            pend = z.get("pending_after_cp") or [None, None]
            out.append(f"writes {z['first_s']:.2f} + {z['append_s']:.2f} + commit, unmount {z['unmount_s']:.2f} s"
                       + (f" ({pend[0]} files pending)" if pend[0] else ""))
        if ref.get("seconds") is not None and "error" not in ref:
            out.append(f"direct: {ref['first_s']:.2f} + {ref['append_s']:.2f} s, {ref['moto_puts']} PUTs")
    d = z.get("delta") or {}
    if z.get("moto_puts") is not None and d and z["moto_puts"] != d.get("set"):
        out.append(f"moto saw {z['moto_puts']} PUTs")
    if z.get("pending_at_stats"):
        out.append(f"{z['pending_at_stats']} files still pending at stats")
    if z.get("unmount_said"):
        out.append(f"unmount: {z['unmount_said']}")
    if z.get("journal_left"):
        out.append(f"journal left {z['journal_left']}")
    if z.get("warnings"):
        out.append(f"{len(z['warnings'])} WARN/ERROR log lines")
    return "; ".join(out)


def table(results: str) -> None:
    recs = [json.loads(line) for line in open(results) if line.strip()]
    head = ["rtt", "row", "chunks", "what", "seconds", "reference", "ref seconds", "ratio", "commits", "PUTs",
            "PUT MiB", "GETs", "amplification", "check / notes"]
    rows = []
    warned = []
    for r in recs:
        z, ref = r.get("z") or {}, r.get("ref") or {}
        ratio = ""
        if z.get("seconds") and ref.get("seconds") and "error" not in z and "error" not in ref:
            bound = "<=" if z.get("capped") else ""
            ratio = f"{bound}{ref['seconds'] / z['seconds']:.2f}x"
        d = z.get("delta") or {}
        if d:  # a zarrfs row: the daemon's counters
            commits, puts, put_mib, gets = d.get("shard_commits", "-"), d.get("set", "-"), mib(d["set_bytes"]), d.get("get", "-")
            amp = f"{d['set_bytes'] / z['stored_bytes']:.2f}x" if z.get("stored_bytes") else ""
            if amp and z.get("capped"):
                amp += " so far"
        elif z.get("moto_puts") is not None:  # an rclone row: what moto saw, what was sent
            commits, puts, put_mib, gets = "", z["moto_puts"], mib(z.get("put_bytes", 0)), ""
            amp = ""
        else:
            commits = puts = put_mib = gets = amp = ""
        rows.append([f"{r['lat']:g} ms", r["row"], LABEL[r["size"]], r["what"], secs(z), r.get("ref_what", "") if ref else "",
                     secs(ref), ratio, commits, puts, put_mib, gets, amp, notes_of(r)])
        for w in z.get("warnings") or []:
            warned.append(f"  {r['lat']:g} ms {LABEL[r['size']]} {r['row']}: {w}")
        for w in z.get("log_tail") or []:
            warned.append(f"  {r['lat']:g} ms {LABEL[r['size']]} {r['row']} (log tail): {w}")
    print()
    # text columns left-aligned, numbers right-aligned
    left = {0, 1, 2, 3, 5, len(head) - 1}
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(head)]
    for r in [head, *rows]:
        print("  ".join(f"{str(c):<{w}}" if i in left else f"{str(c):>{w}}"
                        for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    print("""
ratio: reference seconds / seconds (>1: the row is faster than its reference; "<=": the row was
stopped at CAP). Every zarrfs row writes into a fresh prefix of moto (S3) through
zarrfs-delay-proxy, which adds the round trip, with a fresh mount (page cache dropped before).
ref-up: rclone copy of the sharded store (zarr.json + 16 shards) from local disk to S3, 16
transfers: the same bytes uploaded the way a tool that knows nothing of Zarr would, the
reference. ref-files: rclone copy of the unsharded files (zarr.json + one object per inner
chunk), 16 transfers: what per-file uploads cost, for information.
disk-sync: the same chunk files copied to the local disk the journal is on, by a Python loop
that writes each and fdatasyncs it before the next (no FUSE, no network): what "close() returns
once the file is durable on local disk" costs one file after another on this machine, a floor
under the journal row's cp (its ratio: the best the journal row could do here if FUSE and the
store cost nothing).
journal: a prefix holding an empty sharded array (zarr.json, no chunks) mounted with the default
settings (the journal on local disk, write-back after 1 s), cp -r of a local unsharded copy's c/.
into the mount's array c/, then the commit of everything pending and zarrfs unmount. The time runs
from cp's start to unmount's return; the commit is the fsync of the mount root that zarrfs unmount
does first, done just before it (sync MNT) so that the counters, read right after it, include the
commits it made: "cp + commit + unmount" in the notes; "pending after cp": what cp left in the
journal. no-journal: the same with --no-journal (commit at close: every close rewrites its shard,
a GET and a conditional PUT), only at NO_JOURNAL_LATENCIES, stopped at CAP s (">CAP"; its
amplification "so far": what it had PUT / what the store held when stopped).
write-back: the same with --no-journal --write-back-delay 5 (closed files held in memory only).
xarray: a prefix holding an empty xarray dataset mounted with the defaults; xarray to_zarr(mode="a")
of a new variable (encoding chunks = the inner chunk, shards 1024x1024) holding the first 2048
rows, then to_zarr(append_dim="y") of the other 2048 (a fresh process; its time excludes imports),
then commit + unmount as above; reference: the same two writes by xarray directly to the S3 URL
(s3fs) through the same proxy. Through the mount xarray creates the array, so zarrfs shows it as
stored and xarray writes whole shards: no shard commits, PUTs are xarray's own (with its metadata).
commits, PUTs, PUT MiB, GETs: the daemon's shard_commits, set, set_bytes and get during the row
(zarrfs stats --json); for the rclone rows, PUTs are moto's log's and PUT MiB the bytes of the
files uploaded. amplification: PUT MiB / the bytes of the final chunk objects (shards) in S3.
check: after every row the store is read back directly from S3 (moto's own port, no proxy, no
zarrfs) with zarr-python (and xr.open_zarr for xarray rows) and compared with the data; the objects
under the prefix must be exactly zarr.json(s) and the 16 shards (the 4097 files for ref-files).""")
    if warned:
        print("\ndaemon log lines at WARN or ERROR (zarrfs=info logs under the work directory's logs/):")
        print("\n".join(warned))


def main(argv: list) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "run":
        return run_command("bench_write_latency.py", args, run)
    if cmd == "client":
        if args[0] != "xarray":
            raise SystemExit(f"bench_write_latency.py client: unknown kind {args[0]}")
        print(json.dumps(client_xarray(args[1], args[2], args[4] if len(args) > 4 else None)))
        return 0
    if cmd == "check":
        print(json.dumps(check(args[0], args[1], args[2], args[3], "--xarray" in args[5:])))
        return 0
    if cmd == "table":
        table(args[0])
        return 0
    print(f"bench_write_latency.py: unknown subcommand {cmd}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
