"""Fixtures of the real-client suite: fixture hierarchies built once per session, and
mounts of the zarrfs binary (one mountpoint per test, always unmounted in teardown).

Environment:
    ZARRFS_BIN        the binary under test (default: target/debug/zarrfs under the repo)
    ZARRFS_RUST_LOG   RUST_LOG given to the daemon (default: zarrfs=info)
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(HERE))

import fixtures as fixtures_script  # noqa: E402
import bad_fixtures as bad_fixtures_script  # noqa: E402
from mounting import Mount, MountError, tree_digest  # noqa: E402


def zarrfs_bin_path() -> Path:
    return Path(os.environ.get("ZARRFS_BIN", REPO / "target" / "debug" / "zarrfs")).resolve()


@dataclass
class Tree:
    """A fixture hierarchy on disk: `root` is what gets mounted."""
    outdir: Path
    manifest: dict

    @property
    def root(self) -> Path:
        return self.outdir / self.manifest["root"]

    def arrays(self, kind: str | None = None) -> list[dict]:
        return [a for a in self.manifest["arrays"] if kind is None or a["kind"] == kind]

    def array(self, path: str) -> dict:
        return next(a for a in self.manifest["arrays"] if a["path"] == path)

    def expected(self, entry: dict):
        import numpy as np
        return np.load(self.outdir / entry["expected"])


@pytest.fixture(scope="session", autouse=True)
def journal_home(tmp_path_factory):
    """Daemons of this session keep their default write journals (remote mounts) under the
    session's temporary directory, not the user's cache: a test that kills a daemon leaves
    its journal behind."""
    if "ZARRFS_TEST_KEEP_CACHE_HOME" not in os.environ:
        os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache-home"))
    yield


# ---------------------------------------------------------------------------------------------
# fixture hierarchies (built once per session)


@pytest.fixture(scope="session")
def tree(tmp_path_factory) -> Tree:
    """The default fixture hierarchy written by zarr-python and tensorstore."""
    outdir = tmp_path_factory.mktemp("fixtures") / "good"
    return Tree(outdir, fixtures_script.build(outdir, ["default"], quiet=True))


@pytest.fixture(scope="session")
def bad_tree(tmp_path_factory) -> Tree:
    """Damaged arrays next to a healthy one (scripts/bad_fixtures.py)."""
    outdir = tmp_path_factory.mktemp("fixtures") / "bad"
    return Tree(outdir, bad_fixtures_script.build(outdir))


def manifest_entries(kind: str | None = None) -> list[dict]:
    """Manifest entries of the default set, for parametrizing at collection time (the specs
    are code, so this needs no hierarchy on disk)."""
    entries = []
    for spec in fixtures_script.default_specs():
        sharded = "sharded" if spec.sharded else "unsharded"
        if kind is None or kind == sharded:
            entries.append(spec.path)
    return entries


@functools.lru_cache(maxsize=None)
def _bad_manifest() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        return bad_fixtures_script.build(Path(tmp) / "bad")


def bad_entries(*expect: str) -> list[str]:
    """Paths of the bad-fixture arrays with the given expectations, at collection time."""
    return [a["path"] for a in _bad_manifest()["arrays"] if a["expect"] in expect]


# ---------------------------------------------------------------------------------------------
# the binary and its mounts


@pytest.fixture(scope="session")
def zarrfs_bin() -> Path:
    path = zarrfs_bin_path()
    if not os.access(path, os.X_OK):
        pytest.fail(f"zarrfs binary not found at {path} (build it, or set ZARRFS_BIN)")
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Remember each phase's outcome on the item, so teardown can print the daemon log."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


def _test_failed(request) -> bool:
    rep = getattr(request.node, "rep_call", None)
    return rep is None or rep.failed


@pytest.fixture
def mounter(zarrfs_bin, tmp_path, request):
    """mounter(source, *options) mounts a view on a fresh mountpoint of this test and returns
    the Mount; every mount is torn down after the test (unmount, kill a stray daemon).
    `cls=` a Mount subclass, given the other keyword arguments."""
    mounts = []

    def mount(source, *options, foreground=False, cls=Mount, **kwargs) -> Mount:
        n = len(mounts)
        m = cls(zarrfs_bin, str(source), tmp_path / f"mnt{n}", list(options),
                tmp_path / f"zarrfs{n}.log", **kwargs)
        mounts.append(m)
        m.start(foreground=foreground)
        return m

    yield mount
    for m in mounts:
        if _test_failed(request):
            print(f"--- daemon log of {m.mountpoint} (last 60 lines) ---")
            print(m.log_tail(60))
        m.stop()


@pytest.fixture
def view(mounter, tree) -> Mount:
    """The default hierarchy mounted with the default (unsharded) view, read-only (mounts are
    writable by default; the write path has its own tests)."""
    return mounter(tree.root, "--read-only")


@pytest.fixture
def frozen_source(tree):
    """Fails the test if anything in the source hierarchy changed during it."""
    before = tree_digest(tree.root)
    yield tree
    assert tree_digest(tree.root) == before, "the source hierarchy was modified"


def run_zarrfs(zarrfs_bin, *args, timeout=60) -> subprocess.CompletedProcess:
    """Run a zarrfs command (not a mount) and return the completed process."""
    return subprocess.run([str(zarrfs_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=Mount.daemon_env())


__all__ = ["Tree", "Mount", "MountError", "run_zarrfs", "manifest_entries", "bad_entries"]
