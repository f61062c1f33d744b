"""The keyword arguments of :func:`zarrfs.mount` and :func:`zarrfs.copy`, one to one with the
command line's options, in one table each.

Each :class:`Option` names the Python keyword, the command-line flag and the kind of value,
which says which Python values it takes and how it is spelled on the command line:

- ``flag``: ``True`` passes the flag, ``False`` or ``None`` leaves it out;
- ``int``: a non-negative integer;
- ``size``: bytes as an integer, or a string with a suffix K, M or G (``"512M"``);
- ``seconds``: a number of seconds (``int`` or ``float``); ``ttl`` also takes ``"indefinite"``;
- ``str``, ``path``: text, or a path (``str`` or ``os.PathLike``);
- ``choice``: one of the listed strings;
- ``pairs``: ``-o NAME[=VALUE]`` options, a mapping (``{"aws_virtual_hosted_style_request":
  "true", "ro": None}``) or a sequence of ``"NAME[=VALUE]"`` strings; each becomes one ``-o``.

A test (tests/clients/test_wheel.py) checks these tables against ``zarrfs mount --help`` and
``zarrfs copy --help``, and against the signatures of ``mount`` and ``copy``, so an option
added to the command line without its Python twin fails it. Flags the Python API sets itself
are listed in ``MOUNT_MANAGED`` and ``COPY_MANAGED`` with the reason.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Tuple


@dataclass(frozen=True)
class Option:
    """One keyword argument and the command-line option it becomes."""

    keyword: str
    flag: str
    kind: str
    choices: Tuple[str, ...] = ()


MOUNT_OPTIONS: Tuple[Option, ...] = (
    Option("read_only", "--read-only", "flag"),
    Option("view", "--view", "choice", ("unsharded", "raw", "v2")),
    Option("v2_compressor", "--v2-compressor", "choice", ("zstd", "gzip", "none")),
    Option("metadata_ttl", "--metadata-ttl", "ttl"),
    Option("cache_size", "--cache-size", "size"),
    Option("prefetch_size", "--prefetch-size", "size"),
    Option("max_inodes", "--max-inodes", "int"),
    Option("write_buffer_size", "--write-buffer-size", "size"),
    Option("cache", "--cache", "path"),
    Option("max_cache_size", "--max-cache-size", "size"),
    Option("write_back_delay", "--write-back-delay", "seconds"),
    Option("journal", "--journal", "flag"),
    Option("no_journal", "--no-journal", "flag"),
    Option("journal_dir", "--journal-dir", "path"),
    Option("xattr", "--xattr", "flag"),
    Option("endpoint_url", "--endpoint-url", "str"),
    Option("region", "--region", "str"),
    Option("no_sign_request", "--no-sign-request", "flag"),
    Option("max_probe_shards", "--max-probe-shards", "int"),
    Option("allow_other", "--allow-other", "flag"),
    Option("uid", "--uid", "int"),
    Option("gid", "--gid", "int"),
    Option("stack", "--stack", "flag"),
    Option("threads", "--threads", "int"),
    Option("log_file", "--log-file", "path"),
    Option("log_format", "--log-format", "choice", ("text", "json")),
    Option("metrics_address", "--metrics-address", "address"),
    Option("metrics_allow_remote", "--metrics-allow-remote", "flag"),
    Option("mount_options", "-o", "pairs"),
)

#: Flags of ``zarrfs mount`` that the Python API does not take, and why.
MOUNT_MANAGED: Dict[str, str] = {
    "--foreground": "mount() runs the daemon and returns once the mount is live",
    "--help": "not an option",
}

COPY_OPTIONS: Tuple[Option, ...] = (
    Option("unshard", "--unshard", "flag"),
    Option("shard", "--shard", "shard"),
    Option("shard_size", "--shard-size", "size"),
    Option("part", "--part", "part"),
    Option("jobs", "--jobs", "int"),
    Option("verify", "--verify", "flag"),
    Option("max_probe_shards", "--max-probe-shards", "int"),
    Option("progress_every", "--progress-every", "seconds"),
)

COPY_MANAGED: Dict[str, str] = {
    "--json": "copy() always asks for the JSON summary, which it returns",
    "--help": "not an option",
}


def _number(option: Option, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{option.keyword}: expected a number, got {value!r}")
    return repr(float(value)) if isinstance(value, float) else str(value)


def _value(option: Option, value: Any) -> List[str]:
    """The command-line words for one keyword argument (not ``None``)."""
    kind = option.kind
    if kind == "flag":
        if not isinstance(value, bool):
            raise TypeError(f"{option.keyword}: expected True or False, got {value!r}")
        return [option.flag] if value else []
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{option.keyword}: expected an int, got {value!r}")
        return [option.flag, str(value)]
    if kind == "size":
        if isinstance(value, str):
            return [option.flag, value]
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{option.keyword}: expected bytes as an int or a str like '64M', got {value!r}")
        return [option.flag, str(value)]
    if kind == "seconds":
        return [option.flag, _number(option, value)]
    if kind == "ttl":
        if value == "indefinite":
            return [option.flag, value]
        return [option.flag, _number(option, value)]
    if kind in ("str", "path"):
        if not isinstance(value, (str, os.PathLike)) or (kind == "str" and not isinstance(value, str)):
            raise TypeError(f"{option.keyword}: expected a {kind}, got {value!r}")
        return [option.flag, os.fspath(value)]
    if kind == "address":
        # A port (int or str: 127.0.0.1) or "HOST:PORT".
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise TypeError(f"{option.keyword}: expected a port or 'HOST:PORT', got {value!r}")
        return [option.flag, str(value)]
    if kind == "choice":
        if value not in option.choices:
            raise ValueError(f"{option.keyword}: one of {', '.join(option.choices)}, not {value!r}")
        return [option.flag, value]
    if kind == "pairs":
        return _pairs(option, value)
    if kind == "part":
        return [option.flag, _part(value)]
    if kind == "shard":
        return _shard(value)
    raise AssertionError(kind)


def _pairs(option: Option, value: Any) -> List[str]:
    if isinstance(value, Mapping):
        items = [k if v is None else f"{k}={v}" for k, v in value.items()]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = list(value)
    else:
        raise TypeError(f"{option.keyword}: expected a mapping or a list of 'NAME[=VALUE]', got {value!r}")
    return [word for item in items for word in (option.flag, item)]


def _part(value: Any) -> str:
    """``(k, n)`` or ``"k/n"``."""
    if isinstance(value, str):
        return value
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"{value[0]}/{value[1]}"
    raise TypeError(f"part: expected (k, n) or 'k/n', got {value!r}")


def _shard(value: Any) -> List[str]:
    """``"auto"``, a shape (``(1024, 1024)`` or ``"1024,1024"``), or ``True`` for the shapes
    DEST holds (``--shard`` alone)."""
    if value is True:
        return ["--shard"]
    if isinstance(value, str):
        return [f"--shard={value}"]
    if isinstance(value, (tuple, list)) and value and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [f"--shard={','.join(str(v) for v in value)}"]
    raise TypeError(f"shard: expected 'auto', a shape like (1024, 1024), or True, got {value!r}")


def arguments(table: Tuple[Option, ...], given: Mapping[str, Any]) -> List[str]:
    """The command-line words for ``given`` keyword arguments (``None`` values left out), in
    the table's order. An unknown keyword raises ``TypeError``, a wrongly typed value
    ``TypeError``, a value outside its choices ``ValueError``."""
    known = {option.keyword: option for option in table}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(unknown)}")
    words: List[str] = []
    for option in table:
        value = given.get(option.keyword)
        if value is not None:
            words += _value(option, value)
    return words
