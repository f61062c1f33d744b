"""Where zarr-python's own test machinery puts its stores.

These modules import only zarr, pytest and hypothesis, so each venv's own pytest runs them
(`.venv/bin/python -m pytest tests/zarr_suites` for zarr 3.1, `.venv-zarr34/bin/python -m pytest
tests/zarr_suites` for zarr 3.4). tests/clients/test_zarr_suites.py runs them through writable
zarrfs mounts; run by hand without ZARR_SUITE_ROOT they are the baseline on local disk.

Environment:
    ZARR_SUITE_ROOT      the directory under which every test gets a fresh directory of its own
                         (created if missing); default: pytest's temporary directory
    ZARR_SUITE_EXAMPLES  hypothesis examples of the state machine (default 20)
    ZARR_SUITE_STEPS     steps per example (default 30)
    ZARR_SUITE_SEED      a seed: the state machine runs randomized from it instead of
                         derandomized (the campaign, scripts/dev/zarr_suite_campaign.sh)
    ZARR_SUITE_SHRINK    1: shrink a failing example (off by default: through a mount shrinking
                         can take minutes; the derandomized run replays the same example)
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def suite_root(tmp_path_factory) -> Path:
    """ZARR_SUITE_ROOT (a directory in a mount), or a temporary directory on local disk."""
    given = os.environ.get("ZARR_SUITE_ROOT")
    if not given:
        return tmp_path_factory.mktemp("zarr-suite-root")
    root = Path(given)
    root.mkdir(parents=True, exist_ok=True)
    return root


@pytest.fixture
def fresh_dir(suite_root, request) -> Path:
    """A new, empty, existing directory of this test under the suite root (named after the
    test, so a failure's leftovers in the mount are easy to find)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:60]
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=suite_root))
