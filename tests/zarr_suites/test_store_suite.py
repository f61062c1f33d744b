"""zarr-python's store conformance tests (zarr.testing.store.StoreTests) for LocalStore rooted
in a fresh directory under ZARR_SUITE_ROOT: get/set/delete with byte ranges, listings
(list, list_prefix, list_dir), getsize, is_empty, clear, set_if_not_exists, read-only
copies, and in zarr 3.4 the sync/async parity laws. The `get`/`set` helpers read and write the
files directly, bypassing the store, as zarr-python's own tests/test_store/test_local.py does,
so each store method is checked against plain file operations on the same directory.

Beyond the inherited tests, the LocalStore-specific checks of zarr-python's test_local.py
(written afresh here): an empty subdirectory does not make a store non-empty, a store creates a
missing root, `get` without a prototype, and `move` of a whole store (a directory rename)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import zarr
from zarr.core.buffer import Buffer, cpu
from zarr.storage import LocalStore
from zarr.testing.store import StoreTests
from zarr.testing.utils import assert_bytes_equal


class TestLocalStoreSuite(StoreTests[LocalStore, cpu.Buffer]):
    store_cls = LocalStore
    buffer_cls = cpu.Buffer

    async def get(self, store: LocalStore, key: str) -> Buffer:
        """The file's bytes, read without the store."""
        return self.buffer_cls.from_bytes(Path(store.root, key).read_bytes())

    async def set(self, store: LocalStore, key: str, value: Buffer) -> None:
        """Write the file (and its parent directories) without the store."""
        path = Path(store.root, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value.to_bytes())

    @pytest.fixture
    def store_kwargs(self, fresh_dir: Path) -> dict[str, str]:
        return {"root": str(fresh_dir)}

    def test_store_repr(self, store: LocalStore) -> None:
        assert str(store) == f"file://{store.root.as_posix()}"

    def test_store_supports_writes(self, store: LocalStore) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: LocalStore) -> None:
        assert store.supports_listing

    # -- LocalStore-specific (zarr-python's tests/test_store/test_local.py)

    async def test_empty_with_empty_subdir(self, store: LocalStore) -> None:
        """Directories without files are not keys: the store stays empty."""
        assert await store.is_empty("")
        (store.root / "foo" / "bar").mkdir(parents=True)
        assert await store.is_empty("")

    def test_creates_new_directory(self, fresh_dir: Path) -> None:
        """A store whose root does not exist yet creates it (with parents) on first write."""
        target = fresh_dir / "a" / "b" / "c"
        assert not target.exists()
        zarr.group(store=self.store_cls(root=target))
        assert (target / "zarr.json").is_file()

    async def test_get_with_prototype_default(self, store: LocalStore) -> None:
        """`get` without a buffer prototype uses the default one."""
        data = self.buffer_cls.from_bytes(b"\x01\x02\x03\x04")
        await self.set(store, "c/0", data)
        assert_bytes_equal(await store.get("c/0", prototype=None), data)

    @pytest.mark.parametrize("ndim", [0, 1, 2, 3])
    async def test_move(self, fresh_dir: Path, ndim: int) -> None:
        """`move` renames the store's root directory: the array reads back from the new root
        and the old root is gone."""
        origin, destination = fresh_dir / "origin", fresh_dir / "destination"
        store = await LocalStore.open(root=origin)
        data = np.arange(4**ndim).reshape((4,) * ndim) if ndim else np.arange(1)[0]
        array = zarr.create_array(store, data=np.asarray(data), chunks=(2,) * ndim or "auto")
        await store.move(str(destination))
        assert store.root == destination
        assert destination.exists()
        assert not origin.exists()
        assert np.array_equal(array[...], data)
