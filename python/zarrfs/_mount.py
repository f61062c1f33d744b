"""Mounting from Python: :func:`mount` runs ``zarrfs mount`` (which detaches a daemon and
returns once the mount is live, or fails with a message) and hands back a :class:`Mount`.

A :class:`Mount` is unmounted by :meth:`Mount.unmount`, on leaving its ``with`` block (also
when an exception leaves it), and at interpreter exit (``atexit``) if still mounted then. A
mountpoint the module made itself (``mountpoint=None``: a new directory under the temporary
directory) is removed after the unmount. Unmounting a mount that a process is still using
fails with EBUSY; it is retried for a few seconds before the error is raised.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from . import _binary, _options

PathLike = Union[str, "os.PathLike[str]"]
Size = Union[int, str]

#: How long an unmount of a busy mount is retried.
UNMOUNT_PATIENCE_SECONDS = 5.0


def _mounted(path: str) -> bool:
    """Whether a filesystem is mounted at ``path`` (by /proc/self/mountinfo)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as table:
            points = [line.split()[4] for line in table if len(line.split()) > 4]
    except OSError:
        return False
    escaped = path.replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011").replace("\n", "\\012")
    return escaped in points


class Mount:
    """A live zarrfs mount; also a context manager that unmounts on leaving.

    Attributes:
        source: what is mounted, as given.
        path: the mountpoint (absolute); open the hierarchy there (``xr.open_zarr(m.path)``).
        warnings: what ``zarrfs mount`` said on stderr while succeeding (e.g. "mounting
            read-only"); each is also issued as a Python ``RuntimeWarning``.
    """

    def __init__(self, source: str, path: str, own_directory: bool, env: Optional[Mapping[str, str]],
                 said: Sequence[str] = ()):
        self.source = source
        self.path = path
        self.warnings = list(said)
        self._own_directory = own_directory
        self._env = env
        self._live = True
        atexit.register(self._at_exit)

    def __repr__(self) -> str:
        state = "mounted" if self._live else "unmounted"
        return f"<zarrfs.Mount {self.source!r} at {self.path!r} ({state})>"

    def __fspath__(self) -> str:
        return self.path

    def __enter__(self) -> "Mount":
        return self

    def __exit__(self, kind, value, traceback) -> None:
        try:
            self.unmount()
        except _binary.ZarrfsError:
            if kind is None:
                raise
            # An exception is already leaving the block: it is the one to see.
            print(f"zarrfs: could not unmount {self.path} after an error", file=sys.stderr)

    @property
    def mounted(self) -> bool:
        """Whether the mount is still there."""
        return self._live and _mounted(self.path)

    def stats(self) -> Dict[str, Any]:
        """The mount's counters, ``zarrfs stats --json`` as a dict (store requests and bytes,
        cache hits, shard commits, FUSE operations; docs/operations.md)."""
        done = _binary.run(["stats", self.path, "--json"], self._env)
        return json.loads(done.stdout)

    def unmount(self) -> None:
        """Unmount (no-op when already unmounted). A busy mount is retried for
        ``UNMOUNT_PATIENCE_SECONDS``; then :class:`ZarrfsError` says what holds it."""
        if not self._live:
            return
        deadline = time.monotonic() + UNMOUNT_PATIENCE_SECONDS
        while True:
            try:
                _binary.run(["unmount", self.path], self._env)
                break
            except _binary.ZarrfsError as error:
                if not _mounted(self.path):
                    break  # gone meanwhile (unmounted by hand)
                if "busy" not in error.message or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self._live = False
        atexit.unregister(self._at_exit)
        if self._own_directory:
            try:
                os.rmdir(self.path)
            except OSError:
                pass

    def _at_exit(self) -> None:
        try:
            self.unmount()
        except Exception as error:  # interpreter exit: say it, do not raise
            print(f"zarrfs: could not unmount {self.path} at exit: {error}", file=sys.stderr)


def mount(
    source: PathLike,
    mountpoint: Optional[PathLike] = None,
    *,
    read_only: Optional[bool] = None,
    view: Optional[str] = None,
    v2_compressor: Optional[str] = None,
    metadata_ttl: Union[float, str, None] = None,
    cache_size: Optional[Size] = None,
    prefetch_size: Optional[Size] = None,
    max_inodes: Optional[int] = None,
    write_buffer_size: Optional[Size] = None,
    cache: Optional[PathLike] = None,
    max_cache_size: Optional[Size] = None,
    write_back_delay: Optional[float] = None,
    journal: Optional[bool] = None,
    no_journal: Optional[bool] = None,
    journal_dir: Optional[PathLike] = None,
    xattr: Optional[bool] = None,
    endpoint_url: Optional[str] = None,
    region: Optional[str] = None,
    no_sign_request: Optional[bool] = None,
    max_probe_shards: Optional[int] = None,
    allow_other: Optional[bool] = None,
    uid: Optional[int] = None,
    gid: Optional[int] = None,
    stack: Optional[bool] = None,
    threads: Optional[int] = None,
    log_file: Optional[PathLike] = None,
    log_format: Optional[str] = None,
    metrics_address: Union[int, str, None] = None,
    metrics_allow_remote: Optional[bool] = None,
    mount_options: Union[Mapping[str, Optional[str]], Sequence[str], None] = None,
    env: Optional[Mapping[str, str]] = None,
) -> Mount:
    """Mount ``source`` (a directory, ``file://``, ``s3://``, ``gs://``, ``az://`` or
    ``http(s)://`` URL) at ``mountpoint`` and return the live :class:`Mount`.

    With ``mountpoint=None`` a new temporary directory is made (and removed after the
    unmount). The call returns once the mount is live. Use it as a context manager::

        with zarrfs.mount("s3://bucket/ds.zarr", read_only=True) as m:
            ds = xr.open_zarr(m.path)

    Every keyword argument but ``env`` is the ``zarrfs mount`` option of the same name
    (``cache_size`` is ``--cache-size``; docs/configuration.md says what each does): flags take
    ``True``; sizes an int of bytes or a string like ``"512M"``; ``metadata_ttl`` seconds or
    ``"indefinite"``; ``metrics_address`` a port (on 127.0.0.1) or ``"HOST:PORT"`` for the
    Prometheus endpoint (docs/metrics.md); ``mount_options`` the ``-o`` options as a mapping or
    list. ``None``
    leaves an option at its default. ``env`` adds environment variables for the daemon
    (credentials, ``AWS_ENDPOINT_URL``); it inherits this process's environment.

    The ``zarrfs`` binary is the one beside the interpreter (``sysconfig.get_path("scripts")``,
    where ``pip install zarrfs`` puts it), else ``$ZARRFS_BIN``, else the first on ``PATH``.

    Raises:
        TypeError: an unknown keyword argument, or a value of the wrong type.
        ValueError: a value outside an option's choices.
        ZarrfsError: the mount failed; ``str(error)`` is zarrfs's message (e.g. "source:
            /data/x.zarr: No such file or directory").
    """
    given = {k: v for k, v in locals().items() if k not in ("source", "mountpoint", "env")}
    words = _options.arguments(_options.MOUNT_OPTIONS, given)
    own = mountpoint is None
    if mountpoint is None:
        path = tempfile.mkdtemp(prefix="zarrfs-")
    else:
        path = os.path.abspath(os.fspath(mountpoint))
    source = os.fspath(source)
    try:
        done = _binary.run(["mount", source, path, *words], env)
    except BaseException:
        if own:
            os.rmdir(path)
        raise
    said = _binary.message_of(done.stderr).splitlines() if done.stderr.strip() else []
    for line in said:
        warnings.warn(f"zarrfs: {line}", RuntimeWarning, stacklevel=2)
    return Mount(source, str(Path(path)), own, env, said)
