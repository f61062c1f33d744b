"""Assertion 3: groups, unsharded arrays and non-Zarr files are shown byte for byte as stored,
and `--view raw` shows the whole source tree byte for byte."""
import os

from helpers import is_inside, walk_dirs, walk_files


def assert_same_files(shown_root, source_root, rels):
    for rel in sorted(rels):
        shown, source = shown_root / rel, source_root / rel
        assert os.stat(shown).st_size == os.stat(source).st_size, f"st_size of {rel}"
        assert shown.read_bytes() == source.read_bytes(), f"bytes of {rel}"


def test_everything_but_sharded_arrays_is_identical(view, tree):
    """Outside sharded arrays, the view has exactly the source's files with the same bytes:
    groups' zarr.json, unsharded arrays (metadata and chunks), README.txt, misc/notes.bin,
    a dot file."""
    sharded = [a["path"] for a in tree.arrays("sharded")]
    source = {k for k in walk_files(tree.root) if not is_inside(k, sharded)}
    shown = {k for k in walk_files(view.path()) if not is_inside(k, sharded)}
    assert shown == source
    assert_same_files(view.path(), tree.root, source)
    for rel in tree.manifest["other_files"]:
        assert rel in shown


def test_group_directories_list_like_the_source(view, tree):
    """Each group's directory lists the same names as in the source (children, zarr.json)."""
    for group in tree.manifest["groups"]:
        assert sorted(os.listdir(view.path(group))) == sorted(os.listdir(tree.root / group)), group


def test_directories_are_directories(view, tree):
    """Every source directory outside sharded arrays is a directory in the view, and the
    non-Zarr file misc/notes.bin is a regular file."""
    sharded = [a["path"] for a in tree.arrays("sharded")]
    for rel in walk_dirs(tree.root):
        if not is_inside(rel, sharded) or rel in sharded:
            assert view.path(rel).is_dir(), rel
    assert view.path("misc/notes.bin").is_file()


def test_raw_view_is_the_source_byte_for_byte(mounter, tree):
    """--view raw: same directories, same files, same sizes and bytes, shards included."""
    raw = mounter(tree.root, "--view", "raw")
    assert walk_dirs(raw.path()) == walk_dirs(tree.root)
    source = set(walk_files(tree.root))
    assert set(walk_files(raw.path())) == source
    assert_same_files(raw.path(), tree.root, source)
