"""A large hierarchy with consolidated metadata (issue 35 aim 5), at a size CI can afford:
about 300 arrays in nested groups, written by zarr-python (sharded ones with various inner
chunks and data types, some unsharded, a few holding data) and consolidated at the root.
Through the mount, zarr-python lists every array, with and without the consolidated
metadata, exactly as it lists them directly, but unsharded: the chunk shape is the inner one;
the root's consolidated block says the same, entry by entry, as the arrays' own documents in
the view; the data reads back as written; and opening the hierarchy or one array costs a
handful of store requests, not one per array. (bench/bench_hierarchy.sh times the same at
10,000 arrays.) The arrays' attributes make the root document big (over 1 MiB), which the view
rewrites when it is first read rather than when the root is found (view/group_doc.rs).

These fail when the consolidated rewrite is wrong; checked with two broken daemons: with the
rewrite turned off (the stored block shown as it is, every test fails: zarr-python's default
open sees the shards, the entries disagree with the arrays' documents, reads decode inner
chunks as shards), and with the entries' chunk shape left at the shard shape (every test but
the request counts fails).
"""
import json
import os

import numpy as np
import pytest

import shardindex as si
from helpers import assert_same_array, load_json, mount_stats

zarr = pytest.importorskip("zarr")

# zarr-python warns that consolidated metadata is not in the v3 specification yet.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

GROUPS, SUBGROUPS, ARRAYS = 3, 5, 20  # g0..g2 / h0..h4 / a00..a19: 300 arrays
DTYPES = ["f4", "i2", "u1", "f8", "i4"]
INNER = [(8, 8), (4, 16), (16, 4), (8, 4)]
DATA_AT = {0, 57, 123, 200, 299}  # leaf arrays that hold data
MODES = {"read-only": ("--read-only",), "writable": ()}
# Store requests an open may send (12 and 4 seen): the documents and listings of the few
# directories on its path, and what zarr-python probes for (the v2 documents it does not find).
# Either is far below one per array of a group (20) or of the hierarchy (304).
DEEP_OPEN_REQUESTS = 16
CONSOLIDATED_OPEN_REQUESTS = 6
BIG_DOCUMENT = 1 << 20  # view/group_doc.rs: from this size a group document is rewritten lazily
NOTE = "a long attribute " * 200  # 3.4 KB per array: a root document over BIG_DOCUMENT


def leaf_spec(k: int) -> dict:
    """The k-th leaf array: sharded (16 x 16 shards) unless k % 10 == 9, its inner chunk shape,
    data type and shape cycling so that every listed field tells arrays apart."""
    shape = (24 + (k % 7) * 4, 16 + (k % 3) * 8)
    if k % 10 == 9:
        return {"shape": shape, "chunks": (8, 8), "dtype": DTYPES[k % 5]}
    return {"shape": shape, "chunks": INNER[k % 4], "shards": (16, 16), "dtype": DTYPES[k % 5]}


def data_of(spec: dict, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 100, size=spec["shape"]) + 1).astype(spec["dtype"])


def build(root):
    """The hierarchy: a sharded array at the root, one in each group, the leaves below;
    consolidated at the root. Returns {path: expected data} of the arrays holding data."""
    top = zarr.open_group(root, mode="w", attributes={"title": "big hierarchy"})
    written = {}

    def create(group, name, spec, path, data):
        arr = group.create_array(name, shape=spec["shape"], chunks=spec["chunks"],
                                 shards=spec.get("shards"), dtype=spec["dtype"],
                                 attributes={"path": path, "note": NOTE}, dimension_names=["y", "x"])
        if data:
            written[path] = data_of(spec, len(written))
            arr[...] = written[path]

    top_spec = {"shape": (40, 40), "chunks": (4, 4), "shards": (20, 20), "dtype": "u2"}
    create(top, "top", top_spec, "top", True)
    k = 0
    for g in range(GROUPS):
        group = top.create_group(f"g{g}", attributes={"g": g})
        create(group, "mid", {**top_spec, "dtype": "f4"}, f"g{g}/mid", g == 1)
        for h in range(SUBGROUPS):
            sub = group.create_group(f"h{h}")
            for a in range(ARRAYS):
                create(sub, f"a{a:02d}", leaf_spec(k), f"g{g}/h{h}/a{a:02d}", k in DATA_AT)
                k += 1
    zarr.consolidate_metadata(root)
    assert os.path.getsize(os.path.join(root, "zarr.json")) > BIG_DOCUMENT
    return written


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    root = tmp_path_factory.mktemp("big") / "root"
    return root, build(root)


def arrays_listed(path, **open_kwargs) -> dict:
    """Every array below the group at `path`, as zarr-python lists it: path -> (shape, chunk
    shape, shard shape, data type)."""
    group = zarr.open_group(path, mode="r", **open_kwargs)
    return {name: (node.shape, node.chunks, node.shards, str(node.dtype))
            for name, node in group.members(max_depth=None) if isinstance(node, zarr.Array)}


def block(doc: dict) -> dict:
    return doc["consolidated_metadata"]["metadata"]


def requests(before: dict, after: dict) -> int:
    return sum(after[k] - before[k] for k in ("get", "head", "list", "list_dir"))


@pytest.mark.parametrize("mode", MODES)
def test_every_array_listed_as_directly_but_unsharded(mounter, big, mode):
    root, _ = big
    direct = arrays_listed(root, use_consolidated=False)
    assert len(direct) == GROUPS * SUBGROUPS * ARRAYS + GROUPS + 1
    assert arrays_listed(root) == direct, "the fixture's consolidated metadata is stale"
    sharded = {p for p, (*_, shards, _) in direct.items() if shards is not None}
    assert len(sharded) == len(direct) - GROUPS * SUBGROUPS * ARRAYS // 10
    view = mounter(root, *MODES[mode])
    want = {p: (shape, chunks, None, dtype) for p, (shape, chunks, _, dtype) in direct.items()}
    consolidated = zarr.open_group(view.path(), mode="r")
    assert consolidated.metadata.consolidated_metadata is not None
    assert arrays_listed(view.path()) == want, "listed through the consolidated metadata"
    assert arrays_listed(view.path(), use_consolidated=False) == want, "listed by directories"
    assert view.alive()


def test_consolidated_block_is_rewritten_entry_by_entry(mounter, big):
    root, _ = big
    view = mounter(root, "--read-only")
    stored, shown = block(load_json(root / "zarr.json")), block(load_json(view.path("zarr.json")))
    assert list(shown) == list(stored)
    rewritten = 0
    for path, entry in stored.items():
        if entry["node_type"] != "array":
            assert shown[path] == entry, path
            continue
        assert shown[path] == si.view_metadata(entry), path
        assert shown[path] == load_json(view.path(path) / "zarr.json"), path
        if entry["codecs"][0]["name"] == "sharding_indexed":
            assert "sharding_indexed" not in json.dumps(shown[path]), path
            inner = entry["codecs"][0]["configuration"]["chunk_shape"]
            assert shown[path]["chunk_grid"]["configuration"]["chunk_shape"] == inner, path
            rewritten += 1
    assert rewritten == GROUPS * SUBGROUPS * ARRAYS * 9 // 10 + GROUPS + 1
    data = view.path("zarr.json").read_bytes()
    assert os.stat(view.path("zarr.json")).st_size == len(data)


@pytest.mark.parametrize("mode", MODES)
def test_written_data_reads_back_through_both_opens(mounter, big, mode):
    root, written = big
    view = mounter(root, *MODES[mode])
    group = zarr.open_group(view.path(), mode="r")
    assert len(written) == len(DATA_AT) + 2
    for path, want in written.items():
        got = group[path][...]
        assert_same_array(got, want, f"{path} through the consolidated metadata")
        assert got.tobytes() == want.tobytes(), path
        alone = zarr.open_array(view.path(path), mode="r")[...]
        assert alone.tobytes() == want.tobytes(), f"{path} opened alone"


def test_opening_costs_a_handful_of_requests(mounter, big):
    """On a fresh mount, the open of one deep array, then the consolidated open of the whole
    hierarchy with every array listed, each send a few store requests: none per array or
    group of the hierarchy (304 and 19)."""
    root, written = big
    view = mounter(root, "--read-only")
    path = [p for p in sorted(written) if p.count("/") == 2][1]
    before = mount_stats(view.path())
    array = zarr.open_array(view.path(path), mode="r")
    opened = mount_stats(view.path())
    assert array.shards is None
    assert requests(before, opened) <= DEEP_OPEN_REQUESTS, (before, opened)
    listed = arrays_listed(view.path())
    after = mount_stats(view.path())
    assert len(listed) == GROUPS * SUBGROUPS * ARRAYS + GROUPS + 1
    assert requests(opened, after) <= CONSOLIDATED_OPEN_REQUESTS, (opened, after)
