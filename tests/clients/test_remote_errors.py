"""Remote mounts that cannot work are refused before the mount is live: `zarrfs mount` exits
non-zero with a message and leaves no mount and no daemon behind, for a missing bucket or
container, a URL without a bucket, and an endpoint nobody listens on (127.0.0.1:9). The time
each refusal takes is recorded (remote-stats)."""
import os
import signal
import subprocess
import time

import pytest

import seed_remote as SR
from conftest import run_zarrfs
from mounting import find_daemons, is_fuse_mounted, wait_until
from remote import record, remote  # noqa: F401 - fixture

REFUSAL_TIMEOUT = 120


def refused(zarrfs_bin, tmp_path, monkeypatch, env: dict, *args) -> tuple[subprocess.CompletedProcess, float]:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    mnt = tmp_path / "mnt"
    mnt.mkdir(exist_ok=True)
    t0 = time.monotonic()
    try:
        res = run_zarrfs(zarrfs_bin, "mount", args[0], mnt, *args[1:], "--log-file",
                         tmp_path / "zarrfs.log", timeout=REFUSAL_TIMEOUT)
    except subprocess.TimeoutExpired:
        res = None
    took = time.monotonic() - t0
    mounted = is_fuse_mounted(mnt)
    # a daemonized child may take a moment to exit after the parent reported the failure
    wait_until(lambda: not find_daemons(zarrfs_bin, mnt), 5)
    daemons = find_daemons(zarrfs_bin, mnt)
    if mounted:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
    for pid in daemons:
        os.kill(pid, signal.SIGKILL)
    assert res is not None, f"mount {args} did not return within {REFUSAL_TIMEOUT} s"
    assert not mounted, f"mount {args} produced a live mount (exit {res.returncode})"
    assert not daemons, f"mount {args} left daemon(s) {daemons} running 5 s after it exited"
    return res, took


def assert_refused(res: subprocess.CompletedProcess, what: str) -> None:
    assert res.returncode != 0, f"{what}: exit 0"
    assert (res.stderr + res.stdout).strip(), f"{what}: no message"


MISSING = {"s3": "s3://no-such-bucket-zarrfs/data", "azure": "az://nosuchcontainer/data",
           "gcs": "gs://no-such-bucket-zarrfs/data"}


@pytest.mark.parametrize("backend", sorted(MISSING))
def test_missing_bucket_is_refused(remote, zarrfs_bin, tmp_path, monkeypatch, backend):
    remote.ensure(backend)
    res, took = refused(zarrfs_bin, tmp_path, monkeypatch, remote.env(backend), MISSING[backend])
    record("refusal", case=f"missing bucket {backend}", seconds=round(took, 2),
           exit=res.returncode, message=(res.stderr or res.stdout).strip()[-300:])
    assert_refused(res, f"missing bucket on {backend}")


@pytest.mark.parametrize("url", ["s3://", "az://", "gs://"])
def test_url_without_bucket_is_refused(remote, zarrfs_bin, tmp_path, monkeypatch, url):
    backend = {"s3": "s3", "az": "azure", "gs": "gcs"}[url.split(":")[0]]
    res, took = refused(zarrfs_bin, tmp_path, monkeypatch, SR.client_env(backend), url)
    record("refusal", case=f"bad url {url}", seconds=round(took, 2), exit=res.returncode,
           message=(res.stderr or res.stdout).strip()[-300:])
    assert_refused(res, url)


@pytest.mark.parametrize("case", ["s3 --endpoint-url", "s3 AWS_ENDPOINT_URL", "http"])
def test_unreachable_endpoint_is_refused(remote, zarrfs_bin, tmp_path, monkeypatch, case):
    """Nothing listens on 127.0.0.1:9 (discard): the refusal must come without a mount."""
    if case == "http":
        args, env = ["http://127.0.0.1:9/zarrfs/data"], {}
    elif case == "s3 AWS_ENDPOINT_URL":
        args, env = ["s3://zarrfs/data"], {**SR.client_env("s3"),
                                           "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    else:
        args, env = ["s3://zarrfs/data", "--endpoint-url", "http://127.0.0.1:9"], SR.client_env("s3")
    res, took = refused(zarrfs_bin, tmp_path, monkeypatch, env, *args)
    record("refusal", case=f"unreachable {case}", seconds=round(took, 2), exit=res.returncode,
           message=(res.stderr or res.stdout).strip()[-300:])
    assert_refused(res, f"unreachable endpoint ({case})")
