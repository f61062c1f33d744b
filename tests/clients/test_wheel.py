"""The wheel, installed as a user would: `pip install dist/zarrfs-*.whl` into a fresh venv
(`python3 -m venv`, no Rust on PATH, run from outside the checkout), then the README's Python
examples (the ```python readme-example blocks, run as written) against a local sample and an
S3 bucket served by a moto server of this module's own, plus the module's promises: errors
carry zarrfs's message, unknown options raise TypeError, the mount is gone after the `with`
block, after an exception in it and at interpreter exit, and the Dask copy's parts together
are byte for byte a one-shot copy, also when a part fails and is retried.

The wheel: $ZARRFS_WHEEL, else built here with `scripts/build_wheel.sh --profile dev` (a few
seconds once target/debug is built). The fresh venv gets the wheel, then
scripts/requirements-wheel-test.txt (xarray, zarr, dask, distributed; pinned). The time from
`pip install` of the wheel to a live mount is printed and recorded in .cache/wheel-times.json.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, zarrfs_bin_path

sys.path.insert(0, str(REPO / "python"))
from zarrfs import _options  # noqa: E402  (the table, checked against the binary's --help)

REQS = REPO / "scripts" / "requirements-wheel-test.txt"
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
          "AWS_DEFAULT_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}


def tree_bytes(root: Path) -> dict:
    """Relative path -> sha256 of every file under root."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def mounted(path) -> bool:
    with open("/proc/self/mountinfo") as table:
        return any(line.split()[4] == str(path) for line in table)


# ---------------------------------------------------------------------------------------------
# fixtures: the wheel, a fresh venv, the sample dataset, a moto server holding it


@pytest.fixture(scope="module")
def wheel() -> Path:
    """$ZARRFS_WHEEL (scripts/test.sh builds it), else a wheel built now from target/debug."""
    given = os.environ.get("ZARRFS_WHEEL")
    if given:
        return Path(given)
    out = subprocess.run(["bash", str(REPO / "scripts" / "build_wheel.sh"), "--profile", "dev"],
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip().splitlines()[-1])


class Venv:
    """A fresh venv holding the wheel; `run` runs Python code in it the way a user would."""

    def __init__(self, root: Path, work: Path):
        self.root, self.work = root, work
        self.python = root / "bin" / "python"
        path = [p for p in os.environ.get("PATH", "").split(":") if ".cargo" not in p and p]
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("ZARRFS_BIN", "PYTHONPATH", "VIRTUAL_ENV", "RUST_LOG")}
        self.env.update(PATH=":".join([str(root / "bin"), *path]), TMPDIR=str(work))

    def run(self, code: str, *args: str, env: dict | None = None, timeout: float = 240,
            check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run([str(self.python), "-c", code, *args], cwd=self.work, timeout=timeout,
                             env={**self.env, **(env or {})}, capture_output=True, text=True)
        if check:
            assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr}"
        return out


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, np.ndarray]:
    """A sharded dataset written by xarray (variable t, consolidated metadata)."""
    import xarray as xr

    root = tmp_path_factory.mktemp("sample") / "ds.zarr"
    t = np.arange(64 * 48, dtype="float32").reshape(64, 48) / 7
    xr.Dataset({"t": (("time", "x"), t)}, coords={"time": np.arange(64)}).to_zarr(
        root, zarr_format=3, encoding={"t": {"chunks": (8, 8), "shards": (32, 24)}})
    return root, t


@pytest.fixture(scope="module")
def s3(sample, tmp_path_factory):
    """A moto server of this module's own on a free port, bucket `bucket` holding ds.zarr."""
    import boto3

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path_factory.mktemp("moto") / "log", "w")
    server = subprocess.Popen([str(REPO / ".venv" / "bin" / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    deadline = time.monotonic() + 60
    while True:
        try:
            client.create_bucket(Bucket="bucket")
            break
        except Exception:
            assert time.monotonic() < deadline and server.poll() is None, "moto did not start"
            time.sleep(0.2)
    root, _ = sample
    for f in root.rglob("*"):
        if f.is_file():
            client.put_object(Bucket="bucket", Key=f"ds.zarr/{f.relative_to(root)}", Body=f.read_bytes())
    yield {**S3_ENV, "AWS_ENDPOINT_URL": endpoint}
    server.terminate()
    server.wait(10)


@pytest.fixture(scope="module")
def venv(wheel, sample, tmp_path_factory) -> Venv:
    """The fresh venv: the wheel alone first (timed up to a live mount), then the clients."""
    base = tmp_path_factory.mktemp("wheel")
    work = base / "work"
    work.mkdir()
    start = time.monotonic()
    subprocess.run(["python3", "-m", "venv", str(base / "venv")], check=True)
    made = time.monotonic()
    v = Venv(base / "venv", work)
    pip = [str(v.python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, str(wheel)], check=True, env=v.env, cwd=work, timeout=300)
    # CLOCK_MONOTONIC is the machine's: the child's reading when live compares with ours.
    out = v.run("import sys, time, zarrfs\nm = zarrfs.mount(sys.argv[1])\nassert m.mounted\n"
                "print(time.monotonic())\nm.unmount()", str(sample[0]))
    seconds = float(out.stdout.strip()) - made
    print(f"\nwheel: python3 -m venv {made - start:.1f} s; then pip install of the wheel to a "
          f"live mount {seconds:.1f} s ({wheel.name}, {wheel.stat().st_size / 2**20:.1f} MiB)")
    times = REPO / ".cache" / "wheel-times.json"
    times.parent.mkdir(exist_ok=True)
    times.write_text(json.dumps({"wheel": wheel.name, "bytes": wheel.stat().st_size,
                                 "venv_seconds": round(made - start, 2),
                                 "install_to_mount_seconds": round(seconds, 2)}) + "\n")
    subprocess.run([*pip, "-r", str(REQS)], check=True, env=v.env, cwd=work, timeout=600)
    return v


def readme_examples() -> str:
    """The README's ```python readme-example blocks, in order, as one script."""
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"(?ms)^```python readme-example\n(.*?)^```", text)
    assert len(blocks) >= 2, "README.md lost its Python examples"
    return "\n".join(blocks)


# ---------------------------------------------------------------------------------------------
# the README, run as written


def test_readme_examples(venv, sample, s3, zarrfs_bin):
    _, expected = sample
    np.save(venv.work / "expected.npy", expected)
    script = readme_examples() + textwrap.dedent("""
        import numpy as np
        np.testing.assert_array_equal(t, np.load("expected.npy"))
        assert not m.mounted
        """)
    out = venv.run(script, env=s3)
    assert re.search(r"^\d+ GETs$", out.stdout, re.M), out.stdout
    # The reference: a one-shot copy of the local sample by the binary under test.
    ref = venv.work / "reference.zarr"
    subprocess.run([str(zarrfs_bin), "copy", str(sample[0]), str(ref), "--unshard"], check=True,
                   capture_output=True)
    whole = tree_bytes(ref)
    assert len(whole) > 20
    assert tree_bytes(venv.work / "ds-unsharded.zarr") == whole
    assert tree_bytes(venv.work / "ds-parts.zarr") == whole
    files = sum(1 for k in whole)
    assert f"{files} files in 4 parts" in out.stdout


@pytest.fixture(scope="module")
def zarrfs_bin() -> Path:
    return zarrfs_bin_path()


# ---------------------------------------------------------------------------------------------
# the module's promises, through the installed wheel


def test_binary_and_command_line(venv):
    out = venv.run("import zarrfs; print(zarrfs.binary())")
    assert out.stdout.strip() == str(venv.root / "bin" / "zarrfs")
    version = venv.run("import runpy, sys; sys.argv = ['zarrfs', '--version']; "
                       "runpy.run_module('zarrfs', run_name='__main__')")
    assert version.stdout.startswith("zarrfs ")
    direct = subprocess.run([str(venv.root / "bin" / "zarrfs"), "--version"], capture_output=True, text=True)
    assert version.stdout == direct.stdout


def test_mount_errors_and_options(venv, sample):
    out = venv.run(textwrap.dedent("""
        import sys, zarrfs
        try:
            zarrfs.mount("missing.zarr")
        except zarrfs.ZarrfsError as e:
            print("error:", e)
        for bad in ({"bogus": 1}, {"cache_size": [1]}, {"read_only": "yes"}, {"foreground": True}):
            try:
                zarrfs.mount(sys.argv[1], **bad)
            except TypeError as e:
                print("type:", e)
        try:
            zarrfs.mount(sys.argv[1], view="sideways")
        except ValueError as e:
            print("value:", e)
        with zarrfs.mount(sys.argv[1], view="raw", cache_size="16M", metadata_ttl=2.5,
                          mount_options={"ro": None}) as m:
            import os
            print("raw:", sorted(os.listdir(os.path.join(m.path, "t", "c"))))
            stats = m.stats()
            print("stats:", stats["list_dir"] >= 1, all(isinstance(v, int) for v in stats.values()))
        """), str(sample[0]))
    lines = out.stdout.splitlines()
    error = next(line for line in lines if line.startswith("error:"))
    assert "missing.zarr" in error and "No such file or directory" in error
    types = [line for line in lines if line.startswith("type:")]
    assert len(types) == 4
    assert "bogus" in types[0] and "cache_size" in types[1] and "read_only" in types[2]
    assert "foreground" in types[3]
    assert "sideways" in next(line for line in lines if line.startswith("value:"))
    # The raw view shows the shards themselves: 2 x 2 shards, no inner chunk files.
    assert "raw: ['0', '1']" in out.stdout
    assert "stats: True True" in out.stdout


def test_unmounted_after_with_exception_and_exit(venv, sample):
    out = venv.run(textwrap.dedent("""
        import sys, zarrfs, os
        with zarrfs.mount(sys.argv[1]) as m:
            inside = m.mounted
        print("with:", m.path, inside, m.mounted, os.path.exists(m.path))
        try:
            with zarrfs.mount(sys.argv[1]) as m:
                raise KeyError("inside")
        except KeyError:
            print("raised:", m.path, m.mounted, os.path.exists(m.path))
        """), str(sample[0]))
    with_line = next(line for line in out.stdout.splitlines() if line.startswith("with:")).split()
    assert with_line[2:] == ["True", "False", "False"]
    raised = next(line for line in out.stdout.splitlines() if line.startswith("raised:")).split()
    assert raised[2:] == ["False", "False"] and not mounted(raised[1])
    # A process that exits without unmounting: atexit unmounts.
    mp = venv.work / "left-open"
    mp.mkdir()
    exit_run = venv.run(textwrap.dedent("""
        import sys, zarrfs
        m = zarrfs.mount(sys.argv[1], sys.argv[2])
        print("live:", m.mounted)
        """), str(sample[0]), str(mp))
    assert "live: True" in exit_run.stdout
    left = mounted(mp)
    if left:  # do not leave it behind for the next run
        subprocess.run([str(venv.root / "bin" / "zarrfs"), "unmount", str(mp)])
    assert not left, "the mount outlived the interpreter"


def test_options_table_matches_the_binary(zarrfs_bin):
    import inspect

    sys.path.insert(0, str(REPO / "python"))
    import zarrfs

    for command, table, managed, function, own in (
            ("mount", _options.MOUNT_OPTIONS, _options.MOUNT_MANAGED, zarrfs.mount, {"source", "mountpoint", "env"}),
            ("copy", _options.COPY_OPTIONS, _options.COPY_MANAGED, zarrfs.copy, {"source", "dest", "env"})):
        help_text = subprocess.run([str(zarrfs_bin), command, "--help"], capture_output=True,
                                   text=True, check=True).stdout
        flags = set(re.findall(r"(?m)^ {2,6}(?:-\w, )?(--[a-z0-9][a-z0-9-]*)", help_text))
        flags |= set(re.findall(r"(?m)^ {2,6}(-o) <", help_text))
        hidden = {"--writable"}  # hidden by clap: a no-op kept for scripts
        assert flags - hidden == {o.flag for o in table} | set(managed), command
        for option in table:
            if option.flag.startswith("--"):
                assert option.keyword == option.flag[2:].replace("-", "_")
        keywords = set(inspect.signature(function).parameters) - own
        assert keywords == {o.keyword for o in table}, command


# ---------------------------------------------------------------------------------------------
# Dask


DASK_RETRY = """
import json, sys, zarrfs, zarrfs._binary
from distributed import Client, LocalCluster
import zarrfs.dask

zarrfs._binary.binary = lambda: sys.argv[3]   # the flaky wrapper, for the tasks in this process
with LocalCluster(n_workers=2, threads_per_worker=1, processes=False) as cluster, Client(cluster) as client:
    summary = zarrfs.dask.copy(sys.argv[1], sys.argv[2], parts=3, client=client, jobs=4)
print(json.dumps(summary))
"""

FLAKY = """#!/bin/sh
# Part 1/3 fails once, after copying all it had to: the retry must resume (skip it all).
case "$*" in *"--part 1/3"*)
    if [ ! -e "{marker}" ]; then
        touch "{marker}"; "{binary}" "$@" > /dev/null 2>&1
        echo "zarrfs: injected failure of part 1/3" >&2; exit 1
    fi ;;
esac
exec "{binary}" "$@"
"""


@pytest.mark.parametrize("source", ["local", "s3"])
def test_dask_copy_union_is_the_whole(venv, sample, s3, zarrfs_bin, source):
    dest = venv.work / f"dask-{source}.zarr"
    src = str(sample[0]) if source == "local" else "s3://bucket/ds.zarr"
    out = venv.run(textwrap.dedent("""
        import json, sys
        from distributed import Client, LocalCluster
        import zarrfs.dask
        with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster) as client:
            print(json.dumps(zarrfs.dask.copy(sys.argv[1], sys.argv[2], parts=5, client=client)))
        """), src, str(dest), env=s3)
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    ref = venv.work / f"one-shot-{source}.zarr"
    subprocess.run([str(zarrfs_bin), "copy", str(sample[0]), str(ref), "--unshard"], check=True,
                   capture_output=True)
    whole = tree_bytes(ref)
    assert tree_bytes(dest) == whole
    assert summary["ok"] and len(summary["parts"]) == 5
    assert sorted(p["part"] for p in summary["parts"]) == [f"{k}/5" for k in range(5)]
    assert summary["files_copied"] == len(whole)
    assert summary["files_copied"] == sum(p["files_copied"] for p in summary["parts"])


def test_dask_copy_retries_a_failed_part(venv, sample, zarrfs_bin):
    wrapper = venv.work / "flaky-zarrfs"
    marker = venv.work / "failed-once"
    wrapper.write_text(FLAKY.format(marker=marker, binary=venv.root / "bin" / "zarrfs"))
    wrapper.chmod(0o755)
    dest = venv.work / "dask-retry.zarr"
    out = venv.run(DASK_RETRY, str(sample[0]), str(dest), str(wrapper))
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert marker.exists(), "the injected failure did not happen"
    retried = next(p for p in summary["parts"] if p["part"] == "1/3")
    assert retried["files_copied"] == 0 and retried["files_skipped"] > 0, retried
    ref = venv.work / "one-shot-retry.zarr"
    subprocess.run([str(zarrfs_bin), "copy", str(sample[0]), str(ref), "--unshard"], check=True,
                   capture_output=True)
    assert tree_bytes(dest) == tree_bytes(ref)
    # A part that keeps failing raises, with zarrfs's message.
    failing = venv.work / "failing-zarrfs"
    failing.write_text("#!/bin/sh\necho 'zarrfs: injected failure, always' >&2\nexit 1\n")
    failing.chmod(0o755)
    out = venv.run(DASK_RETRY, str(sample[0]), str(venv.work / "never.zarr"), str(failing), check=False)
    assert out.returncode != 0 and "CopyError: injected failure, always" in out.stderr, out.stderr
