"""A `--read-only` mount of an object store reads files without opening them (no OPEN or
RELEASE per file), and keeps their pages until their time or size changes: the time shown for
an object carries its version in its sub-second part, so a shard rewritten with the same sizes
(even within the same second) shows a new time, and its new bytes are read once the TTL has
passed. The data set (a sharded uint32 array in versions of equal sizes) is the disk cache
tests'.
"""
from __future__ import annotations

import os
import time

from helpers import file_refaults
from remote import delta, remote, remote_view, stats  # noqa: F401 - fixtures
from test_disk_cache import N_CHUNKS, check_copy, copy_array, ds, reseed, seed  # noqa: F401


def test_files_are_read_without_opens_and_a_rewrite_shows_after_the_ttl(remote, remote_view, ds, tmp_path):
    prefix = seed(remote, ds, "unopened")
    m = remote_view("s3", "--read-only", "--metadata-ttl", "1", prefix=prefix)
    before = stats(m)
    copy_array(m, tmp_path / "first")
    check_copy(tmp_path / "first", ds.old, "the first copy")
    d = delta(before, stats(m))
    assert d["fuse_opens"] == 0, f"files were opened: {d}"
    assert d["fuse_reads"] >= N_CHUNKS, d
    chunk = m.path("a/c/0/0")
    first = os.stat(chunk).st_mtime_ns
    # Re-read warm: the kernel keeps the pages, the daemon is not asked. Unless the machine
    # took some back (proactive reclaim: DAMON's pageout pages out page cache on some VMs):
    # each read the daemon gets must then be matched by a file page faulted back in.
    before, refaults = stats(m), file_refaults()
    copy_array(m, tmp_path / "warm")
    d, refaulted = delta(before, stats(m)), file_refaults() - refaults
    assert d["get"] == 0, f"a warm copy asked the store: {d}"
    assert d["fuse_reads"] <= refaulted, f"a warm copy asked the daemon ({refaulted} pages refaulted): {d}"
    # The same sizes, other bytes: only the time tells the kernel.
    reseed(ds, prefix, "new")
    time.sleep(1.3)
    copy_array(m, tmp_path / "second")
    check_copy(tmp_path / "second", ds.new, "the copy after the rewrite and the TTL")
    second = os.stat(chunk).st_mtime_ns
    assert second != first
    assert first % 10**9 != 0 and second % 10**9 != 0, (first, second)
