"""A crash while writing: a foreground mount takes a stream of chunk writes from four threads
(small known payloads; every close() that returned is recorded), and the daemon is killed
with SIGKILL in the middle of the stream. After cleaning up the dead mount, no shard in the
source may be torn or unparseable, and every write whose close() returned must be in the
store (the write in flight on a chunk may or may not be). A new mount then shows exactly
the store, with no temporary file visible. Three rounds, killed at different points."""
import os
import signal
import subprocess
import sys
import threading
import time

import shardindex as si
from writing import (build, mount_writable, parse_payload, payload, payload_spec, shard_problems,
                     view_matches_store)

WRITER = r"""
import os, struct, sys, threading
mnt, base = sys.argv[1], int(sys.argv[2])
keys = sys.argv[3:]
lock = threading.Lock()

def run(t):
    mine = [(n, k) for n, k in enumerate(keys) if n % 4 == t]
    seq = base
    while True:
        seq += 1
        for index, key in mine:
            data = struct.pack("<4sIII", b"zfsw", t, index, seq)
            try:
                fd = os.open(os.path.join(mnt, key), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
            except OSError as e:
                with lock:
                    print(f"error {key} {seq} {e.errno}", flush=True)
                return
            with lock:
                print(f"ack {key} {seq}", flush=True)

threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
for t in threads: t.start()
for t in threads: t.join()
"""

ARRAY = "crash/arr"


def store_state(array_dir) -> dict:
    layout = si.load_layout(array_dir)
    return {k: parse_payload(v)[2] for k, v in si.expected_chunk_files(layout).items()}


def one_round(mounter, root, keys, base, kill_after, previous) -> dict:
    view = mount_writable(mounter, root, foreground=True)
    pids = set(view.pids) | {view.proc.pid}
    for i in range(4):  # chunk directories are implicit: mkdir makes them appear
        view.path(ARRAY).joinpath("c", str(i)).mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(view.path(ARRAY)), str(base), *keys],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked, lines, enough = {}, [], threading.Event()

    def reader():
        for line in child.stdout:
            lines.append(line.split())
            if line.startswith("ack "):
                _, key, seq = line.split()
                acked[key] = int(seq)
                if sum(1 for x in lines if x[0] == "ack") >= kill_after:
                    enough.set()
        enough.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    assert enough.wait(60), "the writer did not get going"
    time.sleep(0.002 * (kill_after % 5))
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    child.wait(timeout=60)
    thread.join(timeout=10)
    view.stop()
    assert not view.is_mounted()
    n_acks = sum(1 for x in lines if x[0] == "ack")
    assert n_acks >= kill_after, f"only {n_acks} writes acknowledged: {child.stderr.read()[-1000:]}"

    errors = [x for x in lines if x[0] == "error"]
    leftovers = [p.name for p in (root / ARRAY).rglob("*") if ".zarrfs-tmp." in p.name]
    print(f"killed after {n_acks} acks; writer errors {errors[:4]}; temp files left {leftovers}")
    assert errors, "the writer saw no error: the kill did not interrupt the stream"
    problems = shard_problems(root / ARRAY, allow_temp=True)
    assert problems == [], f"after kill -9 at {n_acks} acks: {problems[:10]}"
    state = store_state(root / ARRAY)
    lost = []
    for key in keys:
        got = state.get(key, 0)
        if key in acked:  # the last acknowledged write, or the next one (in flight)
            ok = got in (acked[key], acked[key] + 1)
        else:
            ok = got in (previous.get(key, 0), base + 1)
        if not ok:
            lost.append(f"{key}: acknowledged {acked.get(key)}, previous {previous.get(key)}, "
                        f"stored {got}")
    assert lost == [], f"acknowledged writes lost by the crash ({n_acks} acks): {lost}"
    return state


def test_kill_during_writes_loses_no_acknowledged_write(mounter, tmp_path):
    spec = payload_spec(ARRAY, shape=(16, 16), shard=(8, 8))
    root = tmp_path / "src"
    build(root, [spec])
    keys = [si.chunk_key((i, j), spec.cke) for i in range(4) for j in range(4)]
    state = {}
    for n, kill_after in enumerate([37, 121, 263]):
        state = one_round(mounter, root, keys, base=(n + 1) * 1_000_000, kill_after=kill_after,
                          previous=state)

    # a fresh mount shows exactly the store, and hides leftover temporary files
    view = mount_writable(mounter, root)
    assert view_matches_store(view.path(ARRAY), root / ARRAY) == []
    visible = [name for _, dirs, files in os.walk(view.path()) for name in dirs + files
               if ".zarrfs-tmp." in name]
    assert visible == [], f"temporary files visible in the view: {visible}"
    # and takes writes again
    key = keys[5]
    view.path(ARRAY).joinpath(key).write_bytes(payload(7, 5, 7))
    assert store_state(root / ARRAY)[key] == 7
    view.stop()
    assert shard_problems(root / ARRAY, allow_temp=True) == []
