"""Assertion 1: through the unsharded view, zarr-python and tensorstore read every array of
the fixture hierarchy equal to the data originally written (so also equal to each other)."""
import pytest

from conftest import manifest_entries
from helpers import READERS, assert_same_array


@pytest.mark.parametrize("path", manifest_entries())
@pytest.mark.parametrize("client", sorted(READERS))
def test_client_reads_view_as_written(view, tree, client, path):
    """A real client opens the view of the array and reads exactly the written data."""
    got = READERS[client](view.path(path))
    assert_same_array(got, tree.expected(tree.array(path)), f"{client} on view {path}")
    assert view.alive()


def test_clients_agree_on_whole_hierarchy(view, tree):
    """Both clients, reading every array through one mount, get identical arrays."""
    for entry in tree.arrays():
        a = READERS["zarr-python"](view.path(entry["path"]))
        b = READERS["tensorstore"](view.path(entry["path"]))
        assert_same_array(a, b, f"zarr-python vs tensorstore on view {entry['path']}")
