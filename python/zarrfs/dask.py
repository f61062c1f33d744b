"""A copy split over a Dask cluster: :func:`copy` submits ``zarrfs copy --part k/N`` for
k = 0 … N-1 as N tasks (``dask.distributed``, ``pip install 'zarrfs[dask]'``), each running the
binary on whichever worker it lands, and combines their summaries.

The parts are disjoint and cover the whole (docs/copying.md, "Many machines"); they may run
at the same time against the same destination. A part that fails (its task raises
:class:`zarrfs.CopyError`, or its worker dies) is retried by Dask up to ``retries`` times;
a retried part resumes, skipping what it already wrote. Every worker needs the ``zarrfs``
binary (the wheel installed in its environment) and access to source and destination.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ._copy import CopyError, PathLike
from ._copy import copy as _copy

#: Summary fields that add up over parts.
_SUMMED = ("units", "shards", "stored_bytes", "files_copied", "bytes_copied", "files_skipped",
           "bytes_skipped", "files_verified", "files_failed")
#: Summary fields whose largest value over parts is kept.
_PEAKS = ("held_keys_peak", "pack_held_bytes_peak")


def _copy_part(source: str, dest: str, k: int, n: int, options: Mapping[str, Any]) -> Dict[str, Any]:
    """One task: part k of n (raises on failure, which makes Dask retry it)."""
    return _copy(source, dest, part=(k, n), **options)


def combine(summaries: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One summary from the parts' summaries: counters summed, peaks and seconds the largest,
    ``ok`` when every part is, ``failures`` joined, ``parts`` the parts' own summaries."""
    first = summaries[0] if summaries else {}
    total: Dict[str, Any] = {"source": first.get("source"), "dest": first.get("dest"),
                             "ok": all(s.get("ok") for s in summaries)}
    for field in _SUMMED:
        total[field] = sum(s.get(field, 0) for s in summaries)
    for field in _PEAKS + ("seconds",):
        total[field] = max((s.get(field, 0) for s in summaries), default=0)
    total["failures"] = [f for s in summaries for f in s.get("failures", [])]
    packed: Dict[str, Any] = {}
    for s in summaries:
        packed.update(s.get("packed", {}))
    if packed:
        total["packed"] = packed
    total["parts"] = summaries
    return total


def copy(
    source: PathLike,
    dest: PathLike,
    parts: int,
    client: Optional[Any] = None,
    *,
    retries: int = 2,
    **options: Any,
) -> Dict[str, Any]:
    """Copy ``source`` to ``dest`` as ``parts`` tasks on a Dask cluster and return the combined
    summary (see :func:`combine`; ``parts`` in it lists each part's own).

    Args:
        source, dest: as for :func:`zarrfs.copy`; paths must mean the same on every worker.
        parts: how many parts (tasks); a few per worker balances uneven parts.
        client: a ``distributed.Client``; ``None`` takes the current default client.
        retries: how many times Dask reruns a failed part (each rerun resumes).
        **options: the keyword arguments of :func:`zarrfs.copy` (``shard``, ``jobs``,
            ``verify``, ``env`` ...), but not ``part``.

    Raises:
        CopyError: a part still failed after its retries.
        TypeError: an unknown option, or ``part``.
    """
    import os
    import uuid

    from distributed import default_client, wait

    if "part" in options:
        raise TypeError("zarrfs.dask.copy: the parts are its own; give parts=N, not part=")
    if not isinstance(parts, int) or isinstance(parts, bool) or parts < 1:
        raise TypeError(f"parts: a positive int, not {parts!r}")
    _check(options)
    client = client if client is not None else default_client()
    source, dest = os.fspath(source), os.fspath(dest)
    token = uuid.uuid4().hex[:12]
    futures = [
        client.submit(_copy_part, source, dest, k, parts, options, retries=retries, pure=False,
                      key=f"zarrfs-copy-{token}-part-{k}-of-{parts}")
        for k in range(parts)
    ]
    wait(futures)
    failed = [f for f in futures if f.status != "finished"]
    if failed:
        error = failed[0].exception()
        if isinstance(error, CopyError):
            raise error
        raise CopyError(f"part {futures.index(failed[0])}/{parts}: {error}", 1, [], None) from error
    return combine(client.gather(futures))


def _check(options: Mapping[str, Any]) -> None:
    """Refuse, before anything is submitted, what :func:`zarrfs.copy` would refuse in every
    task (an unknown option, a wrong type)."""
    import inspect

    known = set(inspect.signature(_copy).parameters) - {"source", "dest", "part"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"zarrfs.dask.copy: unexpected keyword argument(s): {', '.join(unknown)}")
