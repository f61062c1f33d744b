"""Many readers at once: every chunk file of every sharded array read by 16 threads in a
shuffled order returns exactly the oracle's bytes, and the clients read correctly in parallel."""
import random
from concurrent.futures import ThreadPoolExecutor

import shardindex as si
from helpers import READERS, assert_same_array


def test_parallel_chunk_reads_are_exact(view, tree):
    expected = {}
    for entry in tree.arrays("sharded"):
        for key, data in si.expected_chunk_files(si.load_layout(tree.root / entry["path"])).items():
            expected[f"{entry['path']}/{key}"] = data
    keys = list(expected) * 2
    random.Random(1).shuffle(keys)
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda k: (k, view.path(k).read_bytes()), keys))
    wrong = [k for k, data in got if data != expected[k]]
    assert wrong == [], f"{len(wrong)} chunk files read wrong under concurrency: {wrong[:5]}"
    assert view.alive()


def test_parallel_client_reads(view, tree):
    jobs = [(client, entry) for entry in tree.arrays() for client in sorted(READERS)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda job: READERS[job[0]](view.path(job[1]["path"])), jobs))
    for (client, entry), got in zip(jobs, results):
        assert_same_array(got, tree.expected(entry), f"parallel {client} on {entry['path']}")
