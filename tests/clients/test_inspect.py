"""Assertion 6: `zarrfs inspect --json` reports each array's shape, data type, inner chunk
shape, shard shape, view codecs, shard count and inner chunk count as the independent reader
computes them, and reports problems for damaged inputs (and none for healthy ones)."""
import json

import pytest

import shardindex as si
from conftest import bad_entries, manifest_entries, run_zarrfs


@pytest.fixture(scope="module")
def report(zarrfs_bin, tree) -> dict:
    res = run_zarrfs(zarrfs_bin, "inspect", tree.root, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def bad_report(zarrfs_bin, bad_tree) -> dict:
    res = run_zarrfs(zarrfs_bin, "inspect", bad_tree.root, "--json", timeout=120)
    # Damage may give a non-zero exit, but not a crash (a panic exits 101, a signal < 0).
    assert 0 <= res.returncode != 101, f"exit {res.returncode}: {res.stderr}"
    return json.loads(res.stdout)


def array_of(report: dict, path: str) -> dict:
    found = [a for a in report["arrays"] if a["path"] == path]
    assert len(found) == 1, f"{path} listed {len(found)} times"
    return found[0]


def problems_for(report: dict, path: str) -> list[str]:
    """Problems of the array at `path` plus top-level problems that name it."""
    own = [p for a in report.get("arrays", []) if a["path"] == path for p in a.get("problems", [])]
    return own + [p for p in report.get("problems", []) if path in p]


LEGACY_ARRAYS = {"legacy/v1": "v1", "legacy/v2/dots": "v2", "legacy/v2/slashes": "v2"}
LEGACY_GROUPS = {"legacy": "v2", "legacy/v2": "v2"}


def test_inspect_lists_arrays_and_groups(report, tree):
    """Every node with its layout: the fixture's v3 nodes, and the v2/v1 ones beside them."""
    v3 = sorted(a["path"] for a in report["arrays"] if a["layout"] == "v3")
    assert v3 == sorted(a["path"] for a in tree.arrays())
    legacy = {a["path"]: a["layout"] for a in report["arrays"] if a["layout"] != "v3"}
    assert legacy == LEGACY_ARRAYS
    assert sorted(report["groups"]) == sorted(tree.manifest["groups"] + list(LEGACY_GROUPS))
    assert report["group_layouts"] == {**{g: "v3" for g in tree.manifest["groups"]}, **LEGACY_GROUPS}
    assert report["problems"] == []


def test_inspect_reports_legacy_arrays(report):
    dots = array_of(report, "legacy/v2/dots")
    assert (dots["shape"], dots["chunk_shape"], dots["data_type"]) == ([6, 5], [4, 4], "<i4")
    assert dots["sharded"] is False and dots["inner_chunks"] == 4 and dots["codecs"] == ["blosc"]
    assert array_of(report, "legacy/v2/slashes")["inner_chunks"] == 3
    assert array_of(report, "legacy/v1")["inner_chunks"] == 1


@pytest.mark.parametrize("path", manifest_entries())
def test_inspect_reports_array(report, tree, path):
    """Every field of the array's entry agrees with the stored metadata and the oracle."""
    got = array_of(report, path)
    layout = si.load_layout(tree.root / path)
    view_codecs = [c["name"] for c in si.view_metadata(layout.meta)["codecs"]]
    assert got["shape"] == list(layout.shape)
    assert got["data_type"] == layout.meta["data_type"]
    assert got["sharded"] is layout.sharded
    assert got["chunk_shape"] == list(layout.inner_shape)
    assert got["codecs"] == view_codecs
    assert got["problems"] == []
    if layout.sharded:
        assert got["shard_shape"] == list(layout.chunk_shape)
        assert got["shards"] == len(si.stored_shards(layout))
        assert got["inner_chunks"] == len(si.inner_chunks(layout))
    else:
        assert got["shard_shape"] is None


def test_inspect_file_url_equals_path(zarrfs_bin, tree, report):
    res = run_zarrfs(zarrfs_bin, "inspect", f"file://{tree.root}", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == report


def test_inspect_text_names_every_array(zarrfs_bin, tree):
    res = run_zarrfs(zarrfs_bin, "inspect", tree.root)
    assert res.returncode == 0, res.stderr
    for entry in tree.arrays():
        assert entry["path"] in res.stdout


@pytest.mark.parametrize("path", bad_entries("eio", "raw"))
def test_inspect_reports_problem_of_damaged_input(bad_report, path):
    assert problems_for(bad_report, path), f"no problem reported for {path}"


def test_inspect_healthy_array_next_to_damage(bad_report, bad_tree):
    got = array_of(bad_report, "healthy")
    layout = si.load_layout(bad_tree.root / "healthy")
    assert problems_for(bad_report, "healthy") == []
    assert got["shards"] == len(si.stored_shards(layout))
    assert got["inner_chunks"] == len(si.inner_chunks(layout))
