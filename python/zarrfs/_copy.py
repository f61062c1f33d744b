"""Copying from Python: :func:`copy` runs ``zarrfs copy ... --json`` and returns its summary.

``zarrfs copy`` counts failures rather than stopping at the first (docs/copying.md), prints
its JSON summary either way and exits 1 when anything failed; :func:`copy` then raises
:class:`CopyError`, which carries that summary. Rerunning the same call resumes: what the
destination already holds in full is skipped.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from . import _binary, _options

PathLike = Union[str, "os.PathLike[str]"]


class CopyError(_binary.ZarrfsError):
    """``zarrfs copy`` failed. ``summary`` is its JSON summary as a dict when it printed one
    (``files_failed``, ``failures``), else ``None``."""

    def __init__(self, message: str, returncode: int, command: Sequence[str],
                 summary: Optional[Dict[str, Any]]):
        super().__init__(message, returncode, command)
        self.summary = summary


def copy(
    source: PathLike,
    dest: PathLike,
    *,
    unshard: Optional[bool] = None,
    shard: Union[str, Sequence[int], bool, None] = None,
    shard_size: Union[int, str, None] = None,
    part: Union[Tuple[int, int], str, None] = None,
    jobs: Optional[int] = None,
    verify: Optional[bool] = None,
    max_probe_shards: Optional[int] = None,
    progress_every: Optional[float] = None,
    env: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """Copy ``source`` to ``dest`` with ``zarrfs copy`` and return its ``--json`` summary.

    By default the unsharded view is written (``--unshard``); ``shard=(1024, 1024)``,
    ``shard="auto"`` or ``shard=True`` (the shapes ``dest`` holds) packs into shards instead.
    ``part=(k, n)`` copies part k of n (docs/copying.md, "Many machines");
    :func:`zarrfs.dask.copy` runs all n parts on a Dask cluster. Every keyword argument but
    ``env`` is the ``zarrfs copy`` option of the same name; ``env`` adds environment variables
    (credentials, ``AWS_ENDPOINT_URL``). The binary is found as for :func:`zarrfs.mount`.

    Returns:
        The summary: ``ok``, ``files_copied``, ``bytes_copied``, ``files_skipped``,
        ``files_verified``, ``files_failed``, ``failures``, ``shards``, ``stored_bytes``,
        ``seconds``, ``part`` and more.

    Raises:
        TypeError: an unknown keyword argument or a value of the wrong type;
            ``unshard=True`` with ``shard``.
        CopyError: the copy failed or failed in part; it carries the message and the summary.
    """
    if shard is not None and unshard:
        raise TypeError("copy: unshard=True and shard= exclude each other")
    given = {k: v for k, v in locals().items() if k not in ("source", "dest", "env")}
    given["unshard"] = shard is None
    words = _options.arguments(_options.COPY_OPTIONS, given)
    try:
        done = _binary.run(["copy", os.fspath(source), os.fspath(dest), *words, "--json"], env)
    except _binary.ZarrfsError as error:
        raise CopyError(error.message, error.returncode, error.command, _summary(error.stdout)) from None
    return json.loads(done.stdout)


def _summary(stdout: str) -> Optional[Dict[str, Any]]:
    """The JSON summary in ``stdout``, if any."""
    try:
        summary = json.loads(stdout)
    except ValueError:
        return None
    return summary if isinstance(summary, dict) else None
