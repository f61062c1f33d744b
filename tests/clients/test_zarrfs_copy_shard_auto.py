"""`zarrfs copy SOURCE DEST --shard auto [--shard-size BYTES]`: every array of a hierarchy packed in
a shard shape of its own, whatever its dimensions and chunks: the same number of chunks along
every dimension that has enough (those with fewer take all theirs), as many as fit in
--shard-size stored bytes by the mean size of the array's chunk files. Checked against that rule
computed here, with zarr-python reading the packed copy as the source and its unsharded view
being the source again, byte for byte.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from copying import as_values, contents, copy, mount_copy, same_values, shard_copy
from helpers import walk_files

zarr = pytest.importorskip("zarr")


def expected_shards(doc: dict, chunk_files: list[int], budget: int) -> tuple | None:
    """The shard shape the rule gives, or None when a shard would hold one chunk."""
    shape, chunk = doc["shape"], doc["chunk_grid"]["configuration"]["chunk_shape"]
    grid = [max(1, -(-s // c)) for s, c in zip(shape, chunk)]
    if chunk_files:
        per_chunk = sum(chunk_files) // len(chunk_files)
    else:
        per_chunk = math.prod(chunk) * np.dtype(doc["data_type"]).itemsize
    best = 1
    for k in range(1, max(grid) + 1):
        n = math.prod(min(k, g) for g in grid)
        if n > 1 << 16 or n * max(per_chunk, 1) > budget:
            break
        best = k
    per = [min(best, g) for g in grid]
    if all(k == 1 for k in per):
        return None
    return tuple(c * k for c, k in zip(chunk, per))


def chunk_sizes(root: Path, name: str) -> list[int]:
    return [p.stat().st_size for rel, p in walk_files(root / name).items() if not rel.endswith("zarr.json")]


@pytest.mark.parametrize("group,budget", [("zp", "16K"), ("zp", "1M"), ("ts", "256K")])
def test_each_array_is_packed_in_a_shape_of_its_own_and_unshards_back(zarrfs_bin, mounter, tree, tmp_path,
                                                                      group, budget):
    unsharded = tmp_path / "unsharded"
    mount_copy(mounter, tree.root / group, unsharded)
    res = shard_copy(zarrfs_bin, unsharded, tmp_path / "packed", "--shard-size", budget, "--json", shape="auto")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    shards = same_values(unsharded, tmp_path / "packed")
    # The summary names every packed array with its shards: what zarr-python finds.
    assert summary["packed"] == {name: list(s) for name, s in shards.items() if s}, summary["packed"]
    limit = int(budget[:-1]) << {"K": 10, "M": 20}[budget[-1]]
    packed = 0
    for name, arr in zarr.open_group(str(unsharded), mode="r").arrays():
        doc = json.loads((unsharded / name / "zarr.json").read_text())
        want = expected_shards(doc, chunk_sizes(unsharded, name), limit) if arr.ndim else None
        assert shards[name] == want, (name, arr.shape, arr.chunks, shards[name], want)
        if want:
            packed += 1
            # A shard holds the budget at most, on average (the rule goes by the mean chunk size;
            # edge shards hold fewer chunks), plus its index.
            index = 16 * math.prod(w // c for w, c in zip(want, arr.chunks)) + 4
            sizes = chunk_sizes(tmp_path / "packed", name)
            assert not sizes or sum(sizes) / len(sizes) <= limit + index, (name, sizes, limit)
            assert len(sizes) <= len(chunk_sizes(unsharded, name)), name
    # Arrays of several dimension counts were packed: not one shape for all.
    assert packed >= 3, shards
    assert len({len(s) for s in shards.values() if s}) >= 2, shards
    if budget == "1M":
        # Without --json, the shards chosen are said before the copy starts.
        res = shard_copy(zarrfs_bin, unsharded, tmp_path / "again", "--shard-size", budget, shape="auto")
        assert res.returncode == 0, res.stderr
        said = {line.split(" in shards of ")[0].removeprefix("zarrfs copy: packing "): line.split(" in shards of ")[1]
                for line in res.stderr.splitlines() if " in shards of " in line}
        assert said == {name: " x ".join(map(str, s)) for name, s in shards.items() if s}, res.stderr
    res = copy(zarrfs_bin, tmp_path / "packed", tmp_path / "back")
    assert res.returncode == 0, res.stderr
    assert as_values(contents(tmp_path / "back")) == as_values(contents(unsharded))


def test_a_budget_no_array_fits_twice_and_a_misplaced_size_are_refused(zarrfs_bin, mounter, tree, tmp_path):
    unsharded = tmp_path / "unsharded"
    mount_copy(mounter, tree.root / "zp", unsharded)
    res = shard_copy(zarrfs_bin, unsharded, tmp_path / "dest", "--shard-size", "1", shape="auto")
    assert res.returncode != 0
    assert "no array to pack" in res.stderr and "shard of 1 bytes" in res.stderr, res.stderr
    assert not walk_files(tmp_path / "dest")
    res = shard_copy(zarrfs_bin, unsharded, tmp_path / "dest2", "--shard-size", "lots", shape="auto")
    assert res.returncode != 0 and "--shard-size" in res.stderr, res.stderr
    # A SHAPE sets the size itself: --shard-size with one is a mistake, said before anything.
    res = shard_copy(zarrfs_bin, unsharded, tmp_path / "dest3", "--shard-size", "1M")
    assert res.returncode != 0 and "--shard-size goes with --shard auto" in res.stderr, res.stderr
    assert not walk_files(tmp_path / "dest2") and not walk_files(tmp_path / "dest3")
