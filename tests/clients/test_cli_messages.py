"""Common mistakes get a one-line answer that names the cause and the fix, with a non-zero exit;
logs carry no colour codes unless stderr is a terminal, come as JSON lines on request, and
never carry credentials; `zarrfs stats` prints a live mount's counters; `--help` names every
source form, the -o rule, examples and the credential variables."""
import json
import os
import subprocess

import pytest

from conftest import run_zarrfs
from helpers import mount_stats
from mounting import Mount, is_fuse_mounted, wait_until


def no_cloud_env() -> dict:
    return {k: v for k, v in Mount.daemon_env().items()
            if not k.startswith(("AWS_", "GOOGLE_", "AZURE_"))}


def run(zarrfs_bin, *args, env=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([str(zarrfs_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env or Mount.daemon_env())


def test_inspect_without_zarr_says_so(zarrfs_bin, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not zarr")
    res = run(zarrfs_bin, "inspect", empty)
    assert res.returncode != 0
    assert res.stderr.strip() == f"zarrfs: no Zarr hierarchy found at {empty}: no zarr.json in it or below it"
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / ".zgroup").write_text('{"zarr_format": 2}')
    # A Zarr v2 hierarchy is reported as such (the mount shows it as stored).
    res = run(zarrfs_bin, "inspect", v2)
    assert res.returncode == 0 and res.stdout == "group /  (v2)\n", (res.stdout, res.stderr)


def test_missing_aws_credentials_lead_with_the_hint_once(zarrfs_bin):
    res = run(zarrfs_bin, "inspect", "s3://zarrfs-no-such-bucket/x", env=no_cloud_env())
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    line = lines[0]
    hint = line.find("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    assert hint != -1, line
    assert line.count("no AWS credentials found") == 1, line
    metadata = line.find("169.254.169.254")
    assert metadata == -1 or metadata > hint, line


def test_azure_without_an_account_says_how_to_name_one(zarrfs_bin, tmp_path):
    for args in (["inspect", "az://container/x"], ["mount", "az://container/x", tmp_path]):
        res = run(zarrfs_bin, *args, env=no_cloud_env())
        assert res.returncode != 0
        assert "no Azure storage account: set AZURE_STORAGE_ACCOUNT_NAME" in res.stderr, res.stderr
        assert "Account must be specified" not in res.stderr


def test_help_names_sources_examples_options_and_credentials(zarrfs_bin):
    res = run(zarrfs_bin, "mount", "--help")
    assert res.returncode == 0
    text = res.stdout
    for needle in ("s3://", "gs://", "az://", "http(s)://", "file://", "Examples:",
                   "mount -t fuse.zarrfs", "-o NAME[=VALUE]", "AWS_ACCESS_KEY_ID",
                   "AWS_SECRET_ACCESS_KEY", "GOOGLE_APPLICATION_CREDENTIALS",
                   "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY", "--stack",
                   "--log-format", "zarrfs unmount"):
        assert needle in text, needle
    for command, argument in (("unmount", "<MOUNTPOINT>"), ("stats", "<MOUNTPOINT>"), ("inspect", "<SOURCE>")):
        res = run(zarrfs_bin, command, "--help")
        assert res.returncode == 0, res.stderr
        # The argument is listed with a description of its own.
        described = [line for line in res.stdout.splitlines() if line.strip().startswith(argument)]
        assert described and len(described[0].split(argument, 1)[1].strip()) > 10, res.stdout
    top = run(zarrfs_bin, "--help").stdout
    for command in ("mount", "unmount", "inspect", "stats"):
        assert f"  {command}" in top, command


def test_foreground_logs_have_no_colour_codes_on_a_pipe(zarrfs_bin, tree, tmp_path):
    mnt = tmp_path / "m"
    mnt.mkdir()
    proc = subprocess.Popen([str(zarrfs_bin), "mount", str(tree.root), str(mnt), "--foreground",
                             "--read-only"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=Mount.daemon_env(), text=True)
    try:
        assert wait_until(lambda: is_fuse_mounted(mnt), 30)
        (mnt / "zarr.json").read_bytes()
        assert run(zarrfs_bin, "unmount", mnt).returncode == 0
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "INFO mounted" in err and "\x1b[" not in err, err[:500]


def test_json_log_lines(zarrfs_bin, tree, mounter):
    view = mounter(tree.root, "--read-only", "--log-format", "json")
    view.stop()
    lines = [json.loads(line) for line in view.log_file.read_text().splitlines()]
    mounted = next(line for line in lines if line["fields"]["message"] == "mounted")
    assert mounted["level"] == "INFO" and mounted["fields"]["source"] == str(tree.root)
    assert "timestamp" in mounted


def test_credentials_never_logged(zarrfs_bin, tmp_path, mounter):
    """Secrets in -o keys and in a URL's user info appear nowhere: not in the log at debug
    level, not in error messages, not in the mount table."""
    secret = "SeCrEt-9f3e2a"
    log = tmp_path / "debug.log"
    mnt = tmp_path / "m"
    mnt.mkdir()
    env = {**no_cloud_env(), "RUST_LOG": "debug"}
    res = run(zarrfs_bin, "mount", "s3://zarrfs-no-such-bucket/x", mnt, "--endpoint-url",
              "http://127.0.0.1:9", "-o", f"aws_access_key_id=AKIAEXAMPLE,aws_secret_access_key={secret}",
              "--log-file", log, env=env, timeout=120)
    assert res.returncode != 0
    assert secret not in res.stderr + res.stdout
    assert secret not in (log.read_text() if log.exists() else "")
    res = run(zarrfs_bin, "mount", f"http://user:{secret}@127.0.0.1:9/x", mnt, "--log-file", log,
              env=env, timeout=120)
    assert res.returncode != 0
    assert secret not in res.stderr + res.stdout + log.read_text()
    assert secret not in open("/proc/self/mountinfo").read()


def test_stats_command(zarrfs_bin, tree, mounter, tmp_path):
    view = mounter(tree.root, "--read-only")
    array = next(a for a in tree.arrays("sharded"))["path"]
    for f in sorted((view.path(array) / "c").rglob("*"))[:20]:
        if f.is_file():
            f.read_bytes()
    res = run(zarrfs_bin, "stats", view.path())
    assert res.returncode == 0, res.stderr
    counters = mount_stats(view.path())
    assert res.stdout.startswith(f"zarrfs mount at {view.path()} ({tree.root})\n")
    assert f"{counters['get']} get (" in res.stdout
    assert "index cache" in res.stdout and "% hits" in res.stdout
    res = run(zarrfs_bin, "stats", view.path(), "--json")
    shown = json.loads(res.stdout)
    assert set(shown) == set(counters) and shown["get"] >= counters["get"] > 0
    res = run(zarrfs_bin, "stats", tmp_path)
    assert res.returncode != 0 and "is not mounted" in res.stderr


def test_debug_logs_follow_each_request(zarrfs_bin, tree, tmp_path):
    """With RUST_LOG=debug every FUSE request runs in a span naming its operation, inode and
    name: the failure of a lookup and the request's end (with its duration) carry it."""
    mnt, log = tmp_path / "m", tmp_path / "debug.log"
    mnt.mkdir()
    env = {**Mount.daemon_env(), "RUST_LOG": "zarrfs=debug"}
    res = run(zarrfs_bin, "mount", tree.root, mnt, "--read-only", "--log-file", log, env=env)
    assert res.returncode == 0, res.stderr
    try:
        assert not (mnt / "no-such-name").exists()
        (mnt / "zarr.json").read_bytes()
    finally:
        run(zarrfs_bin, "unmount", mnt)
    text = log.read_text()
    lookups = [line for line in text.splitlines() if 'op="lookup"' in line and "no-such-name" in line]
    assert any("no such file or directory" in line for line in lookups), lookups
    assert any("close" in line and "time.busy" in line for line in lookups), lookups
    assert any('op="read"' in line and "fh=Some(" in line for line in text.splitlines())
