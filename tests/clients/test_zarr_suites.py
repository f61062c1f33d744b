"""zarr-python's own test machinery through writable zarrfs mounts (tests/zarr_suites): the
store conformance tests (zarr.testing.store.StoreTests for LocalStore) and the stateful
hierarchy test (zarr.testing.stateful.ZarrHierarchyStateMachine) run in a child pytest of each
zarr venv (zarr 3.1 in .venv, zarr 3.4 in .venv-zarr34) with ZARR_SUITE_ROOT in a mount of
  - local: an empty local directory, mounted writable (the default), and
  - s3:    an empty prefix of the moto bucket, mounted writable with the default options (the
           journal with write-back, the default for remote sources).
Every test that passes on local disk must pass on the mount: the same suites first run with
ZARR_SUITE_ROOT on local disk (the baseline: if that fails the harness is broken, not zarrfs).
A failure prints which zarr tests failed with their errors, the child's output tail and the
daemon's log tail.

The state machine runs derandomized, 20 examples x 30 steps on local disk and the local mount,
10 x 20 through S3 (each step there costs about 0.5 s against moto: about 2 minutes a run);
ZARR_SUITE_EXAMPLES / ZARR_SUITE_STEPS override both. scripts/dev/zarr_suite_campaign.sh runs
longer, randomized campaigns."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import REPO
from junit import run_child
from remote import empty_mount, remote, remote_view  # noqa: F401 - fixtures

SUITES_DIR = REPO / "tests" / "zarr_suites"
VENVS = {"zarr3.1": REPO / ".venv", "zarr3.4": REPO / ".venv-zarr34"}
SUITES = ["test_store_suite.py", "test_hierarchy_machine.py"]
SOURCES = ["local", "s3"]
CHILD_TIMEOUT = 900
MACHINE_SIZE = {"local": ("20", "30"), "s3": ("10", "20")}  # examples, steps

# zarr tests allowed to fail on a mount although they pass on local disk, each with the reason
# it is inherent to zarrfs (not a bug to fix): {(source or "*", zarr test node id): reason}.
# Deselected in the child run, so an entry hides nothing else. Keep it empty unless justified.
MOUNT_EXCEPTIONS: dict[tuple[str, str], str] = {}


def run_suite(venv: str, suite: str, root: Path, tmp_path: Path, deselect=(),
              source: str = "local") -> dict:
    """Run one suite module with the venv's pytest and ZARR_SUITE_ROOT=root; returns the exit
    code, output, duration and the failed tests ({node id: first lines of the error})."""
    python = VENVS[venv] / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} missing (run: bash scripts/setup.sh --test)")
    junit = tmp_path / f"junit-{venv}-{suite}.xml"
    cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
           str(SUITES_DIR / suite), f"--junitxml={junit}"]
    cmd += [f"--deselect={node}" for node in deselect]  # node ids are relative to tests/zarr_suites
    env = {"ZARR_SUITE_ROOT": str(root),
           "ZARR_SUITE_EXAMPLES": os.environ.get("ZARR_SUITE_EXAMPLES", MACHINE_SIZE[source][0]),
           "ZARR_SUITE_STEPS": os.environ.get("ZARR_SUITE_STEPS", MACHINE_SIZE[source][1])}
    result = run_child(cmd, REPO, env, CHILD_TIMEOUT, junit)
    print(f"zarr-suite {venv} {suite} root={root}: exit {result['code']} in {result['seconds']:.1f} s")
    return result


def report(result: dict) -> str:
    """Print the child's output tail (the `mounter` fixture prints the daemon's log tail of
    a failed test); return the list of failed zarr tests, for the assertion message."""
    print("--- zarr suite output (last 150 lines) ---")
    print("\n".join(result["output"].splitlines()[-150:]))
    lines = [f"exit {result['code']} after {result['seconds']:.0f} s; "
             f"{len(result['failed'])} zarr test(s) failed:"]
    lines += [f"  {node}: {msg}" for node, msg in sorted(result["failed"].items())]
    return "\n".join(lines)


def exceptions_for(source: str) -> dict[str, str]:
    return {node: why for (src, node), why in MOUNT_EXCEPTIONS.items() if src in ("*", source)}


@pytest.mark.timeout(CHILD_TIMEOUT + 60)
@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize("venv", sorted(VENVS))
def test_zarr_suite_on_local_disk(venv, suite, tmp_path):
    """The baseline: the suite passes with its stores on local disk (ext4/tmpfs), so a failure
    through a mount is the mount's."""
    result = run_suite(venv, suite, tmp_path / "root", tmp_path)
    assert result["code"] == 0, report(result)


@pytest.mark.timeout(CHILD_TIMEOUT + 120)
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize("venv", sorted(VENVS))
def test_zarr_suite_through_mount(venv, suite, source, tmp_path, request):
    """The suite passes with its stores in a writable mount of an empty directory (local) or
    an empty S3 prefix (s3, default options: journal and write-back): zarr-python's stores
    cannot tell the mount from a local disk, and the mount stays up."""
    mount = empty_mount(source, request, tmp_path, f"zarr-suite-{venv}-{suite[:-3]}")
    root = mount.path("suite")
    result = run_suite(venv, suite, root, tmp_path, deselect=exceptions_for(source), source=source)
    assert result["code"] == 0, report(result)
    assert mount.alive(), "the daemon died during the suite"
