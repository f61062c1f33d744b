"""xarray's own Zarr backend tests (xarray/tests/test_backends.py, as installed in each client
venv) with every store they make in a writable mount of an empty local directory: TMPDIR (where
xarray's `create_tmp_file` puts its `.zarr` directories) and the child pytest's basetemp (its
`tmp_path` stores) are directories of the mount. These tests write datasets with `to_zarr`
(appends, regions, encodings, groups, dask), read them back with `open_zarr`/`open_dataset`
and remove them with `shutil.rmtree`: some 50,000 creates, renames and unlinks a run.

The installed xarray's tests do not all pass with the installed zarr-python (version drift:
ZipStore, zarr format 2 dimension names, ...). So the rule is: every test that fails through
the mount must also fail on local disk. Only those are run again there (seconds), with TMPDIR
and basetemp on local disk; a test that fails only through the mount fails this one, with its
error. (zarr-python's own suites: test_zarr_suites.py.)"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO
from helpers import mount_stats
from junit import failures, passed

VENVS = {"zarr3.1": REPO / ".venv", "zarr3.4": REPO / ".venv-zarr34"}
# The classes of xarray's Zarr tests that store on disk (the dict-store ones never reach a
# filesystem): a directory store with and without consolidated metadata, DataArray.to_zarr,
# region="auto" writes, and reading rectilinear (variable) chunk grids.
SELECTION = ("TestZarrDirectoryStore or TestDataArrayToZarr or TestZarrRegionAuto"
             " or TestZarrRectilinearChunksRead")
CHILD_TIMEOUT = 900


def xarray_tests(venv: str) -> Path:
    python = VENVS[venv] / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} missing (run: bash scripts/setup.sh --test)")
    out = subprocess.run([str(python), "-c", "import os, xarray; print(os.path.dirname(xarray.__file__))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    tests = Path(out) / "tests"
    if not (tests / "test_backends.py").exists():
        pytest.fail(f"the installed xarray has no tests at {tests}")
    return tests


def run_xarray(venv: str, where: Path, tmp_path: Path, tag: str, select: list[str] | None = None) -> dict:
    """xarray's backend tests (SELECTION, or the node ids `select`) in a child pytest of the
    venv, with TMPDIR and basetemp in `where`; returns the exit code, output, duration and the
    failed tests ({node id: the error's first lines})."""
    tests = xarray_tests(venv)
    (where / f"tmp-{tag}").mkdir(parents=True)
    junit = tmp_path / f"junit-{venv}-{tag}.xml"
    cmd = [str(VENVS[venv] / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
           f"--rootdir={tests}", f"--junitxml={junit}", f"--basetemp={where / f'basetemp-{tag}'}"]
    cmd += select if select else ["test_backends.py", "-k", SELECTION]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
    env["TMPDIR"] = str(where / f"tmp-{tag}")
    start = time.monotonic()
    try:
        res = subprocess.run(cmd, cwd=tests, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
        code, out = res.returncode, res.stdout + res.stderr
    except subprocess.TimeoutExpired as e:
        code = "timeout"
        out = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr))
    seconds = time.monotonic() - start
    print(f"xarray suite {venv} {tag} in {where}: exit {code} in {seconds:.1f} s")
    return {"code": code, "output": out, "seconds": seconds, "failed": failures(junit),
            "passed": passed(junit)}


def summary(result: dict) -> str:
    lines = result["output"].splitlines()
    return next((line for line in reversed(lines) if " passed" in line or " failed" in line), "(no summary)")


@pytest.mark.timeout(2 * CHILD_TIMEOUT + 120)
@pytest.mark.parametrize("venv", sorted(VENVS))
def test_xarray_zarr_backend_tests_fail_through_a_mount_only_where_they_fail_on_local_disk(
        venv, mounter, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    m = mounter(src)
    mounted = run_xarray(venv, m.path("xarray"), tmp_path, "mount")
    assert mounted["code"] in (0, 1), f"the child pytest did not finish: {mounted['code']}\n" + \
        "\n".join(mounted["output"].splitlines()[-80:])
    assert mounted["passed"] >= 300, f"too few of xarray's tests passed through the mount: {summary(mounted)}"
    assert m.alive(), "the daemon died during the suite"
    stats = mount_stats(m.path())
    assert stats["latency_create_count"] > 1000 and stats["latency_unlink_count"] > 1000, \
        "xarray's stores were not written through the mount"
    if not mounted["failed"]:
        return
    local = run_xarray(venv, tmp_path / "local", tmp_path, "local", select=sorted(mounted["failed"]))
    only_mount = {node: msg for node, msg in mounted["failed"].items() if node not in local["failed"]}
    if only_mount:
        print("--- xarray suite through the mount (last 150 lines) ---")
        print("\n".join(mounted["output"].splitlines()[-150:]))
    assert not only_mount, f"{len(only_mount)} of xarray's tests fail only through the mount " + \
        f"({summary(mounted)}; on local disk: {summary(local)}):\n" + \
        "\n".join(f"  {node}: {msg}" for node, msg in sorted(only_mount.items()))
