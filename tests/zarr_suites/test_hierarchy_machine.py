"""zarr-python's stateful hierarchy test (zarr.testing.stateful.ZarrHierarchyStateMachine) on a
LocalStore rooted in a subdirectory of a fresh directory under ZARR_SUITE_ROOT: hypothesis adds
groups and arrays (random shapes, chunk grids, dtypes and data, written with zarr.from_array),
overwrites and deletes chunks and whole nodes, clears the store (LocalStore.clear() removes and
recreates its root, hence the subdirectory), and after every step compares listings, metadata
and array contents with the same operations applied to a MemoryStore.

Derandomized by default (CI replays the same examples every run); ZARR_SUITE_SEED runs it
randomized from that seed, ZARR_SUITE_EXAMPLES and ZARR_SUITE_STEPS size it (conftest.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from zarr.storage import LocalStore
from zarr.testing.stateful import ZarrHierarchyStateMachine

pytestmark = [pytest.mark.filterwarnings("ignore:Unclosed client session:ResourceWarning")]


def machine_settings() -> settings:
    seed = os.environ.get("ZARR_SUITE_SEED")
    phases = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.explain]
    if os.environ.get("ZARR_SUITE_SHRINK") == "1":
        phases.append(Phase.shrink)
    return settings(
        max_examples=int(os.environ.get("ZARR_SUITE_EXAMPLES", "20")),
        stateful_step_count=int(os.environ.get("ZARR_SUITE_STEPS", "30")),
        derandomize=seed is None,
        database=None,
        deadline=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )


def test_zarr_hierarchy_state_machine(fresh_dir: Path, request) -> None:
    """Every step's listings and contents through LocalStore on this directory agree with
    zarr-python's in-memory model."""
    seed = os.environ.get("ZARR_SUITE_SEED")
    if seed is not None and request.config.getoption("hypothesis_seed", None) is None:
        pytest.fail("ZARR_SUITE_SEED is set: also pass --hypothesis-seed=<the same seed>")
    root = fresh_dir / "store"
    root.mkdir()  # clear() removes the root with shutil.rmtree: it must exist
    store = LocalStore(root)
    run_state_machine_as_test(lambda: ZarrHierarchyStateMachine(store), settings=machine_settings())
