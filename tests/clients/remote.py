"""Fixtures and helpers of the remote-source tests (tests/clients/test_remote_*.py).

The object-store servers (moto for S3, Azurite, fake-gcs-server, nginx for plain HTTP) run on
127.0.0.1, started by scripts/servers.sh; scripts/seed_remote.py puts trees into them and reads
them back. Nothing is skipped: a server that cannot start fails the tests that need it, with
servers.sh's reason.

Fixtures (import them into a test module: `from remote import remote, remote_view`):
    remote       (session) servers started on demand, the default fixture hierarchy seeded once
                 per backend under a run prefix; `remote.seed(backend, local_dir, name)` seeds
                 more; the run prefix is deleted at the end; servers this session started are
                 stopped (ZARRFS_KEEP_SERVERS=1 keeps them running).
    remote_view  (test) remote_view(backend, *options, prefix=None) mounts the URL of the seeded
                 hierarchy (or of `prefix`) through the `mounter` fixture, with the backend's
                 client environment set for the daemon (monkeypatched os.environ, which
                 Mount.daemon_env() copies).
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO
from helpers import mount_stats

import seed_remote as SR  # scripts/ is on sys.path (conftest)

BACKENDS = list(SR.BACKENDS)          # s3, azure, gcs, http
WRITABLE = ["s3", "azure"]            # conditional writes work against these servers
SERVERS_SH = REPO / "scripts" / "servers.sh"
STATS_LOG = Path(os.environ.get("ZARRFS_REMOTE_STATS", REPO / ".cache" / "remote-stats.jsonl"))


def servers_sh(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SERVERS_SH), *args], capture_output=True, text=True,
                          timeout=timeout)


class Remote:
    """Servers and seeded prefixes of one test session."""

    def __init__(self, tree, tmp_factory):
        self.tree = tree
        self.tmp_factory = tmp_factory
        self.run = f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        self.started: list[str] = []
        self.ready: set[str] = set()
        self.failed: dict[str, str] = {}
        self.seeded: dict[tuple, str] = {}

    # -- servers

    def ensure(self, backend: str) -> None:
        """The backend's server runs and answers, and the bucket exists; else the test fails."""
        if backend in self.ready:
            return
        if backend in self.failed:
            pytest.fail(self.failed[backend], pytrace=False)
        was_running = servers_sh("status", backend).returncode == 0
        res = servers_sh("start", backend)
        if res.returncode != 0:
            self.failed[backend] = (f"servers.sh start {backend} failed (exit {res.returncode}):\n"
                                    f"{res.stderr.strip()}\n{res.stdout.strip()}")
            pytest.fail(self.failed[backend], pytrace=False)
        if not was_running:
            self.started.append(backend)
        self.ready.add(backend)

    def env(self, backend: str) -> dict[str, str]:
        return SR.client_env(backend)

    # -- seeding

    def seed(self, backend: str, local_dir: Path, name: str) -> str:
        """Upload local_dir under <run>/<name>; returns the prefix."""
        self.ensure(backend)
        prefix = f"{self.run}/{name}"
        SR.upload_tree(backend, Path(local_dir), prefix)
        self.seeded[(backend, name)] = prefix
        return prefix

    def view_prefix(self, backend: str) -> str:
        """The prefix holding the default fixture hierarchy (seeded on first use)."""
        key = (backend, "view")
        if key not in self.seeded:
            self.seed(backend, self.tree.root, "view")
            got = SR.list_objects(backend, self.seeded[key])
            want = {rel: p.stat().st_size for rel, p in SR.local_files(self.tree.root).items()}
            if backend == "http":  # nginx's WebDAV listing leaves out dot files
                want = {k: v for k, v in want.items() if not any(
                    part.startswith(".") for part in k.split("/"))}
            if got != want:
                pytest.fail(f"seeding {backend} did not produce the tree: missing "
                            f"{sorted(set(want) - set(got))[:5]}, extra {sorted(set(got) - set(want))[:5]}")
        return self.seeded[key]

    def url(self, backend: str, prefix: str) -> str:
        return SR.url(backend, prefix)

    # -- teardown

    def close(self) -> None:
        for backend in sorted(self.ready):
            try:
                SR.delete_prefix(backend, self.run)
            except Exception as e:  # noqa: BLE001 - cleanup must not hide test results
                print(f"remote: could not delete {backend} prefix {self.run}: {e}")
        if os.environ.get("ZARRFS_KEEP_SERVERS") != "1" and self.started:
            servers_sh("stop", *self.started)


_SESSION: dict = {}


@pytest.fixture(scope="session")
def remote(tree, tmp_path_factory):
    # Each test module imports this fixture, and pytest makes one session fixture per module
    # that defines (imports) it: one shared Remote keeps a single seeding and teardown.
    if "remote" not in _SESSION:
        STATS_LOG.unlink(missing_ok=True)  # the log holds the measurements of the last session
        _SESSION["remote"] = Remote(tree, tmp_path_factory)
        _SESSION["users"] = 0
    _SESSION["users"] += 1
    yield _SESSION["remote"]
    _SESSION["users"] -= 1
    if _SESSION["users"] == 0:
        _SESSION.pop("remote").close()


@pytest.fixture
def remote_view(mounter, remote, monkeypatch):
    """remote_view(backend, *options, prefix=None) -> Mount of the backend's URL."""

    def mount(backend: str, *options, prefix: str | None = None, foreground: bool = False):
        remote.ensure(backend)
        if prefix is None:
            prefix = remote.view_prefix(backend)
        for k, v in remote.env(backend).items():
            monkeypatch.setenv(k, v)
        return mounter(remote.url(backend, prefix), *options, foreground=foreground)

    return mount


def empty_mount(source: str, request, tmp_path: Path, name: str):
    """A writable mount of an empty place: a new local directory (`local`), or the prefix
    `name` of this run on moto (`s3`, the default options)."""
    if source == "local":
        src = tmp_path / "src"
        src.mkdir()
        return request.getfixturevalue("mounter")(src)
    remote = request.getfixturevalue("remote")
    return request.getfixturevalue("remote_view")("s3", prefix=f"{remote.run}/{name}")


# ---------------------------------------------------------------------------------------------
# reading buckets back, request counters


def download_tree(backend: str, prefix: str, dest: Path) -> Path:
    """Every object under prefix fetched through the server into dest/<rel>; returns dest."""
    for rel in SR.list_objects(backend, prefix):
        p = dest / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(SR.get_object(backend, SR.join_key(prefix, rel)))
    return dest




def stats(mount) -> dict:
    """The daemon's request counters (the mount's stats ioctl)."""
    return mount_stats(mount.path())


def settled(mount, timeout: float = 10) -> dict:
    """The mount's stats once no request is in flight: a fetch still out (a warm-up or a
    read-ahead going on in the background on a loaded machine) is counted when it starts, and
    its bytes and kind when it ends."""
    return settled_at(mount.path(), timeout)


def settled_at(path, timeout: float = 10) -> dict:
    """`settled` of the mount at `path` (one made without a Mount: mount -t)."""
    deadline = time.monotonic() + timeout
    while True:
        s = mount_stats(path)
        if s["requests_in_flight"] == 0 or time.monotonic() > deadline:
            return s
        time.sleep(0.05)


def delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after}


def record(what: str, **values) -> None:
    """Print a measurement and append it to .cache/remote-stats.jsonl (ZARRFS_REMOTE_STATS;
    emptied when a session starts)."""
    line = json.dumps({"what": what, **values}, sort_keys=True)
    print(f"remote-stats: {line}")
    STATS_LOG.parent.mkdir(parents=True, exist_ok=True)
    with open(STATS_LOG, "a") as f:
        f.write(line + "\n")
