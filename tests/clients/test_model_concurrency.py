"""Concurrency checked by a model: random file operations from several threads through real
mounts of one local source, against the reference model of the unsharded tree (history.py).

Four threads write (O_TRUNC, or a temporary name renamed onto the key), delete, read and list
the 16 chunk files of one array of 4 shards, through one mount or two. Afterwards every key is
read through every mount and from the source's shards, parsed independently. Per file, the
whole history must be explainable by some order of its operations (another mount's changes
within --metadata-ttl); any divergence fails with the seed, the file's operations and the path
of the full operation log. No operation may fail (other than deleting a missing file), none may
hang, no daemon may die, and every shard must parse.
"""
import errno
import os
import shlex
import time
from pathlib import Path

import pytest

import shardindex as si
from history import Checker
from workload import (bad_errnos, final_reads, make_chunk_dirs, run_workload, store_reads)
from writing import build, mount_writable, payload_spec, shard_problems, temp_files

SECONDS = float(os.environ.get("ZARRFS_MODEL_SECONDS", "12"))
# --metadata-ttl of the mounts: 10 or more, the kernel keeps listings; "indefinite" (one mount
# only: another's changes would never show), the daemon also skips listings the mount did not
# change (fs/kernel_listings.rs).
TTL_OPTION = os.environ.get("ZARRFS_MODEL_TTL", "0.5")
INDEFINITE = TTL_OPTION == "indefinite"
TTL = 0.0 if INDEFINITE else float(TTL_OPTION)
WEIGHTS = dict((k, int(v)) for k, v in (kv.split("=") for kv in os.environ["ZARRFS_MODEL_WEIGHTS"].split(","))) \
    if os.environ.get("ZARRFS_MODEL_WEIGHTS") else None
SEED = int(os.environ.get("ZARRFS_MODEL_SEED", str(int(time.time()) % 100000)))
# More mount options, e.g. "--write-back-delay 0.05" (one mount only: another's pending files
# would show only once committed, which the model does not allow for).
OPTIONS = shlex.split(os.environ.get("ZARRFS_MODEL_OPTIONS", ""))
ONE_MOUNT = INDEFINITE or "--write-back-delay" in OPTIONS


def seeds() -> list[int]:
    """The seeds to run: ZARRFS_MODEL_SEEDS="FIRST-LAST" for a campaign (scripts/dev/model_campaign.sh),
    else the one seed."""
    spec = os.environ.get("ZARRFS_MODEL_SEEDS")
    if not spec:
        return [SEED]
    first, _, last = spec.partition("-")
    return list(range(int(first), int(last or first) + 1))


LOGS = Path(__file__).resolve().parents[2] / ".cache"


def report(run, problems, seed) -> str:
    LOGS.mkdir(exist_ok=True)
    log = LOGS / f"model-{seed}.log"
    run.log(log)
    shown = "\n".join(str(p) for p in problems[:5])
    return (f"seed {seed} (rerun: ZARRFS_MODEL_SEED={seed}): {len(problems)} divergences; "
            f"operation log {log}\n{shown}")


def racing_delete(ops, failed) -> bool:
    """Whether a delete of the same file ran while `failed` did (or just before it, within the
    window another mount's change takes to show)."""
    return any(o.kind == "delete" and o.key == failed.key and o.errno is None
               and o.inv < failed.inv + failed.took and o.resp + TTL > failed.inv for o in ops)


@pytest.mark.parametrize("seed", seeds())
@pytest.mark.parametrize("mounts", [1] if ONE_MOUNT else [1, 2])
def test_random_operations_match_the_model(mounter, tmp_path, mounts, seed, monkeypatch):
    # Each open for writing sent to look again is logged, so a writer's ESTALE can be traced.
    monkeypatch.setenv("ZARRFS_RUST_LOG",
                       os.environ.get("ZARRFS_RUST_LOG", "zarrfs=info,zarrfs::fs::write=debug"))
    spec = payload_spec("model/arr", shape=(16, 16), shard=(8, 8))
    root = tmp_path / "src"
    build(root, [spec])
    views = [mount_writable(mounter, root, "--metadata-ttl", TTL_OPTION, *OPTIONS) for _ in range(mounts)]
    pids = [set(v.pids) for v in views]
    keys = [si.chunk_key((i, j), spec.cke) for i in range(4) for j in range(4)]
    roots = [v.path(spec.path) for v in views]
    make_chunk_dirs(roots, keys)

    run = run_workload(roots, keys, threads=4, seconds=SECONDS, seed=seed, weights=WEIGHTS)
    assert run.hung == [], f"seed {seed}: operations never returned: {run.hung}"
    time.sleep(TTL + 0.3)
    final_reads(run, roots, keys)
    assert store_reads(run, root / spec.path, keys) == []
    counts = run.counts()
    print(f"seed {seed}, {mounts} mount(s): {len(run.ops)} operations in {run.seconds:.1f} s, "
          f"longest {run.longest:.3f} s: {counts}")
    assert sum(n for k, n in counts.items() if k.startswith("write")) > 50, counts

    # A file removed while open is ESTALE to its reader (as on NFS): the bytes it was opened
    # on are gone; never wrong bytes. A write whose open races a delete of its file is ENOENT.
    failed = bad_errnos(run, allowed={errno.ESTALE, errno.ENOENT})
    stale = [o for o in run.ops if o.errno == errno.ESTALE]
    assert all(o.kind == "read" for o in stale), [o.line() for o in stale]
    unexplained = [o for o in run.ops if o.errno == errno.ENOENT and o.kind != "delete"
                   and not racing_delete(run.ops, o)]
    assert unexplained == [], "ENOENT with no delete racing it:\n" + "\n".join(
        o.line() for o in unexplained[:10])
    assert failed == [], report(run, [], seed) + "\n" + "\n".join(
        o.line() for o in failed[:10])
    checker = Checker(run.ops, window=TTL)
    problems = checker.check()
    print(f"empty reads while a delete or rename ran (documented limit): {len(checker.known)}")
    assert problems == [], report(run, problems, seed)
    assert shard_problems(root / spec.path, allow_temp=True) == []
    assert [set(v.pids) for v in views] == pids and all(v.alive() for v in views), "a daemon died"
    for v in views:
        v.stop()
    assert temp_files(root) == [], "temporary files left in the source"
