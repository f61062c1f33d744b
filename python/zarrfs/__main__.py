"""``python -m zarrfs ARGS``: the ``zarrfs`` command line, run with the binary this package
finds (see :func:`zarrfs.binary`); its exit status is passed on."""
import os
import sys

from ._binary import binary


def main() -> None:
    path = binary()
    os.execv(path, ["zarrfs", *sys.argv[1:]])


if __name__ == "__main__":
    main()
