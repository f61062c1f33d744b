"""`zarrfs copy SOURCE DEST --unshard` (issue 26, first part): the unsharded view written to DEST
without a mount, byte for byte what `cp -r` of a read-only mount of SOURCE gives; from a local
directory and from S3 (moto), GCS (fake-gcs-server) and Azure (Azurite), to a directory, S3 and
Azure; a destination that holds another
hierarchy is refused and left as it was, one that holds unrelated files is added to.
"""
from __future__ import annotations

import seed_remote as SR
from conftest import run_zarrfs
from copying import contents, copy, mount_copy
from remote import remote  # noqa: F401 - fixture


def test_a_local_copy_is_what_cp_r_of_the_mount_gives(zarrfs_bin, mounter, tree, tmp_path, frozen_source):
    want = mount_copy(mounter, tree.root, tmp_path / "via-mount")
    res = copy(zarrfs_bin, tree.root, tmp_path / "copy")
    assert res.returncode == 0, res.stderr
    got = contents(tmp_path / "copy")
    assert sorted(got) == sorted(want)
    wrong = [rel for rel in want if got[rel] != want[rel]]
    assert not wrong, f"{len(wrong)} files differ, e.g. {wrong[:3]}"
    assert any(rel.endswith("zarr.json") for rel in got) and len(got) > 100
    assert f"copied {len(got)} files" in res.stdout, res.stdout


def test_through_s3_both_ways(zarrfs_bin, mounter, remote, tree, tmp_path):
    """The zarr-python group of the fixture (sharded arrays of every index layout and codec,
    unsharded ones, an empty one)."""
    group = tree.root / "zp"
    want = mount_copy(mounter, group, tmp_path / "via-mount")
    prefix = remote.seed("s3", group, "copy-src")
    s3_dest = f"{SR.url('s3', prefix)}-unsharded"
    env = remote.env("s3")
    res = copy(zarrfs_bin, SR.url("s3", prefix), tmp_path / "from-s3", env=env)
    assert res.returncode == 0, res.stderr
    assert contents(tmp_path / "from-s3") == want
    # To S3, and back: an unsharded hierarchy is shown as stored, so it comes back the same.
    res = copy(zarrfs_bin, group, s3_dest, env=env)
    assert res.returncode == 0, res.stderr
    res = copy(zarrfs_bin, s3_dest, tmp_path / "round-trip", env=env)
    assert res.returncode == 0, res.stderr
    assert contents(tmp_path / "round-trip") == want


def test_a_destination_holding_another_hierarchy_is_refused_and_left_alone(zarrfs_bin, tree, tmp_path):
    dest = tmp_path / "dest"
    res = copy(zarrfs_bin, tree.root / "zp", dest)
    assert res.returncode == 0, res.stderr
    before = contents(dest)
    # Another group copied to the same place: its root zarr.json differs.
    res = copy(zarrfs_bin, tree.root / "ts", dest)
    assert res.returncode != 0
    assert "holds another hierarchy" in res.stderr and "zarr.json" in res.stderr, res.stderr
    assert "nothing was written" in res.stderr, res.stderr
    assert contents(dest) == before
    # A destination inside the source would show up in what is copied, as cp refuses.
    res = copy(zarrfs_bin, dest, dest / "inner" / "copy")
    assert res.returncode != 0 and "lies inside the source" in res.stderr, res.stderr
    assert contents(dest) == before and not (dest / "inner").exists()
    res = copy(zarrfs_bin, tmp_path / "no-such-dir", tmp_path / "other")
    assert res.returncode != 0 and "no-such-dir" in res.stderr, res.stderr
    res = run_zarrfs(zarrfs_bin, "copy", tree.root, tmp_path / "x")
    assert res.returncode != 0 and "--unshard" in res.stderr, res.stderr


def test_unrelated_files_in_the_destination_are_kept(zarrfs_bin, mounter, tree, tmp_path):
    want = mount_copy(mounter, tree.root / "zp", tmp_path / "via-mount")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep me")
    res = copy(zarrfs_bin, tree.root / "zp", dest)
    assert res.returncode == 0, res.stderr
    assert contents(dest) == {**want, "mine.txt": b"keep me"}


def test_to_and_from_azure_and_from_gcs(zarrfs_bin, mounter, remote, tree, tmp_path):
    """Azurite as destination, then as source; fake-gcs-server as source (it refuses the XML
    API's PUT that object_store writes with, which Google Cloud Storage takes: not testable
    here as a destination)."""
    want = mount_copy(mounter, tree.root / "zp", tmp_path / "via-mount")
    remote.ensure("azure")
    dest = SR.url("azure", f"{remote.run}/copy-dest")
    env = remote.env("azure")
    res = copy(zarrfs_bin, tree.root / "zp", dest, env=env)
    assert res.returncode == 0, res.stderr
    assert f"copied {len(want)} files" in res.stdout, res.stdout
    res = copy(zarrfs_bin, dest, tmp_path / "from-azure", env=env)
    assert res.returncode == 0, res.stderr
    assert contents(tmp_path / "from-azure") == want
    prefix = remote.seed("gcs", tree.root / "zp", "copy-src")
    res = copy(zarrfs_bin, SR.url("gcs", prefix), tmp_path / "from-gcs", env=remote.env("gcs"))
    assert res.returncode == 0, res.stderr
    assert contents(tmp_path / "from-gcs") == want
