"""Finding and running the ``zarrfs`` binary.

The wheel installs the binary into the environment's scripts directory (``bin/`` of a venv),
so the module looks there first (``sysconfig.get_path("scripts")``), then at the path in the
``ZARRFS_BIN`` environment variable, then on ``PATH``. Every call resolves it anew, so a test
or a user may point ``ZARRFS_BIN`` elsewhere at run time when no binary sits beside the
interpreter.

Errors: the binary says what went wrong on stderr as ``zarrfs: MESSAGE`` and exits non-zero;
:func:`run` turns that into :class:`ZarrfsError` carrying the message.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path
from typing import Mapping, Optional, Sequence


class ZarrfsError(RuntimeError):
    """A ``zarrfs`` command failed; ``str(error)`` is the binary's own message.

    Attributes:
        message: what the binary said (its stderr, without the ``zarrfs:`` prefix).
        returncode: its exit status.
        command: the argument list run.
        stdout: what it printed on stdout.
    """

    def __init__(self, message: str, returncode: int, command: Sequence[str], stdout: str = ""):
        super().__init__(message)
        self.message = message
        self.returncode = returncode
        self.command = list(command)
        self.stdout = stdout


def binary() -> str:
    """The path of the ``zarrfs`` binary: beside the interpreter's scripts, else
    ``$ZARRFS_BIN``, else the first ``zarrfs`` on ``PATH``.

    Raises:
        FileNotFoundError: none of them exists.
    """
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidate = Path(scripts) / "zarrfs"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    env = os.environ.get("ZARRFS_BIN")
    if env:
        if Path(env).is_file():
            return env
        raise FileNotFoundError(f"ZARRFS_BIN={env}: no such file")
    found = shutil.which("zarrfs")
    if found:
        return found
    raise FileNotFoundError(
        f"no zarrfs binary: not in {scripts}, ZARRFS_BIN is not set and none is on PATH "
        "(pip install zarrfs installs one beside the interpreter)"
    )


def message_of(stderr: str) -> str:
    """The binary's error message: its ``zarrfs:`` lines without the prefix, else all of
    stderr."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    said = [line[len("zarrfs: "):] for line in lines if line.startswith("zarrfs: ")]
    return "\n".join(said or lines) or "no message"


def run(args: Sequence[str], env: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess:
    """Run ``zarrfs ARGS`` to its end, stdout and stderr captured as text; raises
    :class:`ZarrfsError` with the binary's message when it exits non-zero."""
    command = [binary(), *args]
    full_env = None if env is None else {**os.environ, **env}
    done = subprocess.run(command, capture_output=True, text=True, env=full_env,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise ZarrfsError(message_of(done.stderr), done.returncode, command, done.stdout)
    return done
