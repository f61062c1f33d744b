"""zarrfs as a mount(8) file system: `mount -t fuse 'PROGRAM#SOURCE' DIR -o OPTIONS` (the FUSE
helper runs `PROGRAM SOURCE DIR -o OPTIONS`), an fstab entry (`mount -T FSTAB DIR`), the
`fuse.zarrfs` type, and `umount`. Mount options, zarrfs options and object_store keys travel
in one -o list; the mount goes live before mount(8) returns; unknown names are refused with the
valid ones listed."""
import errno
import os
import subprocess
from pathlib import Path

import pytest

import seed_remote as SR
from mounting import find_daemons, mount_entry, on_helper_path, pid_alive, wait_until
from remote import remote  # noqa: F401 - fixture


@pytest.fixture
def mountpoint(zarrfs_bin, tmp_path):
    m = tmp_path / "m"
    m.mkdir()
    yield m
    if mount_entry(m) is not None and mount_entry(m)["fstype"].startswith("fuse"):
        subprocess.run(["umount", "-l", str(m)], capture_output=True)
    for pid in find_daemons(zarrfs_bin, m, helper=True):
        os.kill(pid, 9)


def mount_cmd(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *map(str, args)], capture_output=True, text=True, timeout=60, env=env)


def assert_unmounts(zarrfs_bin, m: Path) -> None:
    pids = find_daemons(zarrfs_bin, m, helper=True)
    assert pids, "no daemon serves the mount"
    res = subprocess.run(["umount", str(m)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert wait_until(lambda: not any(pid_alive(p) for p in pids), 15), "the daemon did not exit"
    assert mount_entry(m) is None


def test_mount_t_fuse_with_mount_and_zarrfs_options(zarrfs_bin, tree, mountpoint):
    res = mount_cmd("-t", "fuse", f"{zarrfs_bin}#{tree.root}", mountpoint, "-o",
                    "ro,view=raw,allow_other,uid=1234,gid=4321,cache_size=16M,metadata_ttl=5,"
                    "noauto,nofail,_netdev,x-systemd.automount,noatime")
    assert res.returncode == 0, res.stderr
    entry = mount_entry(mountpoint)
    assert entry["source"] == f"zarrfs:{tree.root}"
    assert "ro" in entry["options"].split(",")
    array = next(a for a in tree.arrays("sharded"))["path"]
    st = os.stat(mountpoint / array / "zarr.json")
    assert (st.st_uid, st.st_gid) == (1234, 4321)
    # The raw view: the stored zarr.json, byte for byte.
    assert (mountpoint / array / "zarr.json").read_bytes() == (tree.root / array / "zarr.json").read_bytes()
    with pytest.raises(OSError) as err:
        (mountpoint / "new-file").write_bytes(b"x")
    assert err.value.errno == errno.EROFS
    assert_unmounts(zarrfs_bin, mountpoint)


def test_fstab_entry(zarrfs_bin, tree, mountpoint, tmp_path):
    fstab = tmp_path / "fstab"
    fstab.write_text(f"# zarrfs test\n{zarrfs_bin}#{tree.root} {mountpoint} fuse "
                     f"ro,allow_other,nofail,_netdev,view=unsharded,cache_size=32M 0 0\n")
    res = mount_cmd("-T", fstab, mountpoint)
    assert res.returncode == 0, res.stderr
    array = next(a for a in tree.arrays("sharded"))["path"]
    shown = (mountpoint / array / "zarr.json").read_bytes()
    assert shown != (tree.root / array / "zarr.json").read_bytes(), "not the unsharded view"
    assert_unmounts(zarrfs_bin, mountpoint)


def test_fuse_zarrfs_type_from_path(zarrfs_bin, tree, mountpoint):
    """`mount -t fuse.zarrfs SOURCE DIR`: the helper finds `zarrfs` on its fixed PATH
    (/usr/local/bin, where the install script puts it)."""
    with on_helper_path(zarrfs_bin):
        res = mount_cmd("-t", "fuse.zarrfs", tree.root, mountpoint, "-o", "ro")
        assert res.returncode == 0, res.stderr
        assert mount_entry(mountpoint)["source"] == f"zarrfs:{tree.root}"
        assert_unmounts(zarrfs_bin, mountpoint)


def test_remote_source_with_object_store_keys(zarrfs_bin, remote, tree, mountpoint):
    """An S3 fstab-style mount: endpoint, region and credentials all in the -o list, none in
    the environment."""
    remote.ensure("s3")
    prefix = remote.view_prefix("s3")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    keys = SR.client_env("s3")
    options = ",".join([
        "ro", f"endpoint_url={keys['AWS_ENDPOINT_URL']}", f"region={keys['AWS_REGION']}",
        f"aws_access_key_id={keys['AWS_ACCESS_KEY_ID']}",
        f"aws_secret_access_key={keys['AWS_SECRET_ACCESS_KEY']}", "aws_allow_http=true", "_netdev"])
    res = mount_cmd("-t", "fuse", f"{zarrfs_bin}#{SR.url('s3', prefix)}", mountpoint, "-o", options, env=env)
    assert res.returncode == 0, res.stderr
    array = next(a for a in tree.arrays("sharded"))["path"]
    assert sorted(os.listdir(mountpoint / array))
    assert (mountpoint / array / "zarr.json").stat().st_size > 0
    assert_unmounts(zarrfs_bin, mountpoint)


def test_unknown_options_are_refused_with_the_valid_names(zarrfs_bin, tree, mountpoint):
    res = mount_cmd("-t", "fuse", f"{zarrfs_bin}#{tree.root}", mountpoint, "-o", "ro,bogus_option")
    assert res.returncode != 0
    assert "unknown mount option \"bogus_option\"" in res.stderr, res.stderr
    for valid in ("allow_other", "view=", "cache_size=", "object_store"):
        assert valid in res.stderr, res.stderr
    assert mount_entry(mountpoint) is None
    # object_store keys make sense for remote sources only.
    res = mount_cmd("-t", "fuse", f"{zarrfs_bin}#{tree.root}", mountpoint, "-o", "aws_region=x")
    assert res.returncode != 0 and "unknown mount option \"aws_region\"" in res.stderr, res.stderr
    assert mount_entry(mountpoint) is None
