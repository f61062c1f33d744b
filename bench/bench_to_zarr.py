"""xarray `to_zarr` of a new dataset into an S3 mount, next to the same `to_zarr` straight to
the bucket with zarr-python's ObjectStore (obstore), and `cp -r` of an unsharded array into
the mount next to `rclone copy` of it, at each round trip of LATENCIES; run by
bench_to_zarr.sh (which documents it).

    bench_to_zarr.py run WORK --bin BIN [--before BIN] --proxy PROXY --rclone RCLONE
    bench_to_zarr.py client TARGET [ENDPOINT PREFIX]   (one measurement; prints JSON)
    bench_to_zarr.py tree DIR                          (the array cp -r copies)
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SERVERS = REPO / "scripts" / "servers.sh"
BUCKET = "zarrfs"


def say(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def dataset():
    import numpy as np
    import xarray as xr

    t, y, x = 4, 30, 40
    return xr.Dataset(
        {
            "temp": (("t", "y", "x"), np.arange(t * y * x, dtype="f4").reshape(t, y, x)),
            "mask": (("y", "x"), (np.arange(y * x) % 3 == 0).astype("u1").reshape(y, x)),
        },
        coords={"t": np.arange(t), "y": np.arange(y, dtype="f8"), "x": np.arange(x, dtype="f8")},
        attrs={"title": "bench_to_zarr"},
    )


TREE_CHUNKS = (10, 10)  # chunk files of 8 KiB each


def tree(path: str) -> None:
    """An unsharded array of 100 chunk files of 8 KiB (zarr-python's defaults): what `cp -r`
    copies into the mount."""
    import numpy as np
    import zarr

    rows, cols = TREE_CHUNKS[0] * 64, TREE_CHUNKS[1] * 128
    arr = zarr.create_array(path, shape=(rows, cols), chunks=(64, 128), dtype="u1", compressors=None)
    arr[...] = np.random.default_rng(0).integers(0, 255, (rows, cols), dtype="u1")


def sync_dir(path: Path) -> None:
    """`sync DIR` inside the mount: what waits in its journal is stored."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def client(target: str, endpoint: str | None, prefix: str | None) -> None:
    """to_zarr (mode "w") into an empty place, again over it, then read back and compared."""
    import xarray as xr

    store = target
    if endpoint:
        import zarr.storage
        from obstore.store import S3Store

        s3 = S3Store(BUCKET, prefix=prefix, endpoint=endpoint, allow_http=True,
                     access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                     secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"], region="us-east-1")
        store = zarr.storage.ObjectStore(s3)
    ds = dataset()
    out = {}
    for step in ("new", "overwrite"):
        start = time.perf_counter()
        ds.to_zarr(store, mode="w", consolidated=False)
        out[step] = time.perf_counter() - start
        if not endpoint:  # through the mount: until the store holds it too
            sync_dir(Path(target))
            out[f"{step}_stored"] = time.perf_counter() - start
    back = xr.open_zarr(store, consolidated=False, chunks=None).load()  # no dask: obstore stores do not pickle
    out["ok"] = bool(back.identical(ds))
    print(json.dumps(out))


class Bench:
    def __init__(self, work: Path, bins: dict[str, str], proxy: str, rclone: str):
        self.work, self.bins, self.proxy_bin, self.rclone = work, bins, proxy, rclone
        self.port = os.environ.get("TOZARR_S3_PORT", "9391")
        self.servers_env = dict(os.environ, ZARRFS_SERVERS_DIR=str(work / "servers"), ZARRFS_S3_PORT=self.port)
        self.s3_env: dict[str, str] = {}
        self.python = os.environ.get("TOZARR_PYTHON", sys.executable)
        self.n = 0

    def start_server(self) -> None:
        say(f"starting moto (servers.sh, port {self.port})")
        subprocess.run(["bash", str(SERVERS), "start", "s3"], env=self.servers_env, check=True,
                       stdout=subprocess.DEVNULL, timeout=180)
        out = subprocess.run(["bash", str(SERVERS), "env", "s3"], env=self.servers_env, check=True,
                             capture_output=True, text=True).stdout
        for word in shlex.split(out.strip().removeprefix("export ")):
            k, _, v = word.partition("=")
            self.s3_env[k] = v

    def stop_server(self) -> None:
        subprocess.run(["bash", str(SERVERS), "stop", "s3"], env=self.servers_env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def proxy(self, rtt: int) -> tuple[subprocess.Popen, str]:
        port_file = self.work / f"proxy-{rtt}.port"
        port_file.unlink(missing_ok=True)
        proc = subprocess.Popen([self.proxy_bin, "--upstream", f"127.0.0.1:{self.port}",
                                 "--rtt-ms", str(rtt), "--port-file", str(port_file)])
        for _ in range(200):
            if port_file.exists() and port_file.read_text().strip():
                return proc, f"http://127.0.0.1:{port_file.read_text().strip()}"
            time.sleep(0.05)
        proc.kill()
        raise RuntimeError("the delaying proxy did not start")

    @staticmethod
    def client(cmd: list[str], env: dict) -> dict:
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stdout}{res.stderr[-3000:]}")
        return json.loads(res.stdout)

    def measure(self, row: str, endpoint: str) -> dict:
        self.n += 1
        prefix = f"tozarr-{self.n}-{row}"
        env = dict(os.environ, **self.s3_env)
        src = self.work / "tree"
        if row == "direct":
            result = self.client([self.python, __file__, "client", "-", endpoint, prefix], env)
            # rclone as a user would set a remote up: from the environment, default transfers.
            renv = dict(env, RCLONE_CONFIG_BENCH_TYPE="s3", RCLONE_CONFIG_BENCH_PROVIDER="Other",
                        RCLONE_CONFIG_BENCH_ENDPOINT=endpoint, RCLONE_CONFIG_BENCH_REGION="us-east-1",
                        RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=env["AWS_ACCESS_KEY_ID"],
                        RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=env["AWS_SECRET_ACCESS_KEY"])
            renv.pop("AWS_CA_BUNDLE", None)
            start = time.perf_counter()
            subprocess.run([self.rclone, "copy", str(src), f"bench:{BUCKET}/{prefix}/copy",
                            "--config", str(self.work / "rclone.conf")], env=renv, check=True)
            result["cp"] = result["cp_stored"] = time.perf_counter() - start
            return result
        mnt = self.work / "mnt"
        mnt.mkdir(exist_ok=True)
        env["AWS_ENDPOINT_URL"] = endpoint
        binary = self.bins[row]
        subprocess.run([binary, "mount", f"s3://{BUCKET}/{prefix}", str(mnt),
                        "--log-file", str(self.work / f"{row}.log")], env=env, check=True)
        try:
            result = self.client([self.python, __file__, "client", str(mnt / "ds.zarr")], env)
            start = time.perf_counter()
            subprocess.run(["cp", "-r", str(src), str(mnt / "copy")], check=True)
            result["cp"] = time.perf_counter() - start
            sync_dir(mnt / "copy")
            result["cp_stored"] = time.perf_counter() - start
            stats = json.loads(subprocess.run([binary, "stats", str(mnt), "--json"], check=True,
                                              capture_output=True, text=True).stdout)
            result["requests"] = "/".join(str(stats.get(k, 0)) for k in ("get", "head", "set", "erase", "list_dir"))
        finally:
            subprocess.run(["umount", str(mnt)], check=False)
        return result

    def run(self, latencies: list[int], rounds: int) -> None:
        subprocess.run([self.python, __file__, "tree", str(self.work / "tree")], check=True)
        (self.work / "rclone.conf").touch()
        self.start_server()
        try:
            rows = ["direct", *self.bins]
            table = []
            for rtt in latencies:
                proc, endpoint = self.proxy(rtt)
                try:
                    best: dict[str, dict] = {}
                    for _ in range(rounds):
                        for row in rows:  # interleaved
                            r = self.measure(row, endpoint)
                            old = best.get(row)
                            if old is None or r["new"] < old["new"]:
                                best[row] = r
                    table.append((rtt, best))
                finally:
                    proc.kill()
        finally:
            self.stop_server()
        print("\nxarray to_zarr of a new dataset (5 arrays of one chunk each and their group: 11 files) and "
              f"cp -r of an unsharded array (101 files of 8 KiB), fastest of {rounds} interleaved rounds, "
              "seconds; 'stored': until the store holds it (the mount: then sync DIR); ratio: direct / row, "
              "stored; direct: zarr-python + obstore, and rclone copy")
        print(f"{'rtt':>4}  {'row':<8} {'to_zarr':>8} {'stored':>7} {'overwrite':>10} {'stored':>7} {'ratio':>6}  "
              f"{'cp -r':>6} {'stored':>7} {'ratio':>6}  {'read back':<9} requests get/head/put/erase/list")
        for rtt, best in table:
            direct = best["direct"]
            for row, r in best.items():
                ratio = direct["new"] / r.get("new_stored", r["new"])
                cp_ratio = direct["cp"] / r["cp_stored"]
                print(f"{rtt:>4}  {row:<8} {r['new']:>8.2f} {r.get('new_stored', r['new']):>7.2f} "
                      f"{r['overwrite']:>10.2f} {r.get('overwrite_stored', r['overwrite']):>7.2f} {ratio:>6.2f}  "
                      f"{r['cp']:>6.2f} {r['cp_stored']:>7.2f} {cp_ratio:>6.2f}  "
                      f"{'ok' if r['ok'] else 'DIFFERS':<9} {r.get('requests', '')}")


def main() -> None:
    if sys.argv[1] == "tree":
        tree(sys.argv[2])
        return
    if sys.argv[1] == "client":
        target = sys.argv[2]
        endpoint, prefix = (sys.argv[3], sys.argv[4]) if len(sys.argv) > 4 else (None, None)
        client(target, endpoint, prefix)
        return
    work = Path(sys.argv[2])
    args = dict(zip(sys.argv[3::2], sys.argv[4::2]))
    bins = {"mount": args["--bin"]}
    if args.get("--before"):
        bins["before"] = args["--before"]
    latencies = [int(x) for x in os.environ.get("LATENCIES", "0 20").split()]
    Bench(work, bins, args["--proxy"], args["--rclone"]).run(latencies, int(os.environ.get("RUNS", "2")))


if __name__ == "__main__":
    main()
