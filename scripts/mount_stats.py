"""A zarrfs mount's counters, as `zarrfs stats --json` prints them: read with the mount's
stats ioctl on any of its files or directories, for the benchmarks and the tests.

Usage: mount_stats.py MOUNTPOINT   (prints one JSON line)
"""

from __future__ import annotations

import fcntl
import json
import os
import sys

# _IOR('Z', 1, [u8; 16383]): the counters as JSON into a buffer of that size; the ioctl
# returns the JSON's length.
STATS_IOCTL = (2 << 30) | (16383 << 16) | (ord("Z") << 8) | 1


def mount_stats(path) -> dict:
    """The counters of the zarrfs mount that `path` belongs to."""
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = bytearray(16383)
        n = fcntl.ioctl(fd, STATS_IOCTL, buf, True)
    finally:
        os.close(fd)
    return json.loads(bytes(buf[:n]))


if __name__ == "__main__":
    print(json.dumps(mount_stats(sys.argv[1])))
