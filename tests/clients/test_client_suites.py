"""The Zarr tests of xarray and dask, as installed in each client venv, with every store they
make in a writable mount of an empty local directory (and, with the newest zarr-python, of an
empty S3 prefix on moto): TMPDIR (where xarray's `create_tmp_file`
puts its `.zarr` directories) and the child pytest's basetemp (`tmp_path`, `tmpdir`) are
directories of the mount.
  - xarray: its Zarr backend tests (xarray/tests/test_backends.py) that store on disk. They
    write datasets with `to_zarr` (appends, regions, encodings, groups, dask), read them back
    with `open_zarr`/`open_dataset` and remove them with `shutil.rmtree`: some 50,000 creates,
    renames and unlinks a run.
  - dask: `da.to_zarr`/`da.from_zarr` (dask/array/tests/test_array_core.py -k zarr).

The installed tests do not all pass with the installed zarr-python (version drift: ZipStore,
zarr format 2 dimension names, a warning dask expects...). So the rule is: every test that
fails through the mount must also fail on local disk. Only those are run again there
(seconds), with TMPDIR and basetemp on local disk; a test that fails only through the mount
fails this one, with its error. (zarr-python's own suites: test_zarr_suites.py.)"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from helpers import mount_stats
from junit import run_child
from remote import empty_mount, remote, remote_view  # noqa: F401 - fixtures

VENVS = {"zarr3.1": REPO / ".venv", "zarr3.4": REPO / ".venv-zarr34"}
# package: (its test directory, module, which of its tests run (by node id), tests that must
# pass through the mount at least). Chosen by node id, not `-k`: `-k` also matches the names
# of the directories above (".venv-zarr34" holds "zarr").
# xarray: the classes of its Zarr tests that store on disk (the dict-store ones never reach a
# filesystem): a directory store with and without consolidated metadata, DataArray.to_zarr,
# region="auto" writes, and reading rectilinear (variable) chunk grids.
XARRAY_CLASSES = {"TestZarrDirectoryStore", "TestDataArrayToZarr", "TestZarrRegionAuto",
                  "TestZarrRectilinearChunksRead"}
SUITES = {
    "xarray": ("tests", "test_backends.py", lambda node: node.split("::")[1] in XARRAY_CLASSES, 300),
    # dask: its tests of `da.to_zarr` and `da.from_zarr`, by their names.
    "dask": ("array/tests", "test_array_core.py", lambda node: "zarr" in node.split("::")[-1], 30),
}
CHILD_TIMEOUT = 900


def installed_tests(venv: str, package: str) -> Path:
    python = VENVS[venv] / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} missing (run: bash scripts/setup.sh --test)")
    out = subprocess.run([str(python), "-c", f"import os, {package}; print(os.path.dirname({package}.__file__))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    subdir, module, _, _ = SUITES[package]
    tests = Path(out) / subdir
    if not (tests / module).exists():
        pytest.fail(f"the installed {package} has no {module} at {tests}")
    return tests


def chosen(venv: str, package: str, tests: Path) -> list[str]:
    """The node ids of the package's tests chosen (SUITES), collected in the venv."""
    _, module, wanted, at_least = SUITES[package]
    res = subprocess.run([str(VENVS[venv] / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          f"--rootdir={tests}", "--collect-only", module],
                         cwd=tests, capture_output=True, text=True, timeout=300)
    nodes = [line.strip() for line in res.stdout.splitlines() if line.startswith(f"{module}::")]
    picked = [node for node in nodes if wanted(node.split("[")[0])]
    assert len(picked) >= at_least, f"only {len(picked)} of {package}'s tests chosen from {len(nodes)}:\n" + \
        "\n".join(res.stdout.splitlines()[-20:])
    return picked


def run_suite(venv: str, package: str, where: Path, tmp_path: Path, tag: str,
              select: list[str] | None = None) -> dict:
    """The package's Zarr tests (its selection, or the node ids `select`) in a child pytest of
    the venv, with TMPDIR and basetemp in `where`; returns the exit code, output, duration,
    the failed tests ({node id: the error's first lines}) and how many passed."""
    tests = installed_tests(venv, package)
    (where / f"tmp-{tag}").mkdir(parents=True)
    junit = tmp_path / f"junit-{venv}-{package}-{tag}.xml"
    cmd = [str(VENVS[venv] / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
           f"--rootdir={tests}", f"--junitxml={junit}", f"--basetemp={where / f'basetemp-{tag}'}"]
    cmd += select if select else chosen(venv, package, tests)
    result = run_child(cmd, tests, {"TMPDIR": str(where / f"tmp-{tag}")}, CHILD_TIMEOUT, junit)
    print(f"{package} suite {venv} {tag} in {where}: exit {result['code']} in {result['seconds']:.1f} s")
    return result


def summary(result: dict) -> str:
    lines = result["output"].splitlines()
    return next((line for line in reversed(lines) if " passed" in line or " failed" in line), "(no summary)")


# Where the mount's source is: an empty local directory with each venv; an empty S3 prefix
# (moto; the default options: journal) with the newest zarr-python only, for CI's time.
CASES = [(venv, package, "local") for venv in sorted(VENVS) for package in sorted(SUITES)] + \
    [("zarr3.4", package, "s3") for package in sorted(SUITES)]


@pytest.mark.timeout(2 * CHILD_TIMEOUT + 120)
@pytest.mark.parametrize("venv,package,source", CASES)
def test_zarr_tests_of_a_client_fail_through_a_mount_only_where_they_fail_on_local_disk(
        venv, package, source, tmp_path, request):
    m = empty_mount(source, request, tmp_path, f"client-suite-{venv}-{package}")
    mounted = run_suite(venv, package, m.path(package), tmp_path, "mount")
    assert mounted["code"] in (0, 1), f"the child pytest did not finish: {mounted['code']}\n" + \
        "\n".join(mounted["output"].splitlines()[-80:])
    at_least = SUITES[package][3]
    assert mounted["passed"] >= at_least, f"too few of {package}'s tests passed through the mount: {summary(mounted)}"
    assert m.alive(), "the daemon died during the suite"
    stats = mount_stats(m.path())
    assert stats["latency_create_count"] > 100, f"{package}'s stores were not written through the mount"
    if not mounted["failed"]:
        return
    local = run_suite(venv, package, tmp_path / "local", tmp_path, "local", select=sorted(mounted["failed"]))
    only_mount = {node: msg for node, msg in mounted["failed"].items() if node not in local["failed"]}
    if only_mount:
        print(f"--- {package}'s tests through the mount (last 150 lines) ---")
        print("\n".join(mounted["output"].splitlines()[-150:]))
    assert not only_mount, f"{len(only_mount)} of {package}'s tests fail only through the mount " + \
        f"({summary(mounted)}; on local disk: {summary(local)}):\n" + \
        "\n".join(f"  {node}: {msg}" for node, msg in sorted(only_mount.items()))
