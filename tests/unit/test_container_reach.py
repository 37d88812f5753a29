"""Which host paths the job container's user can reach, and the masks that make the rest reachable."""

from __future__ import annotations

import pytest

from launcher.docker import container_spec as cs
from launcher.errors import ConfigError

USER = (1000, 1000)
OPEN = cs.HostDir(0o40755, 0, 0)
PRIVATE = cs.HostDir(0o40700, 0, 0)  # mktemp -d, as root
FILE = cs.HostDir(0o100644, 0, 0, is_dir=False)


def _stat(private: set[str], files: set[str] = frozenset(), unreadable: set[str] = frozenset()):
    def stat(path: str) -> cs.HostDir:
        if path in unreadable:
            return cs.HostDir(0o100600, 0, 0, is_dir=False)
        if path in files:
            return FILE
        return PRIVATE if path in private else OPEN

    return stat


def test_may_reads_owner_group_and_other_bits():
    assert cs.may(cs.HostDir(0o40700, 1000, 5), USER, 5)
    assert not cs.may(cs.HostDir(0o40700, 0, 1000), USER, 1)
    assert cs.may(cs.HostDir(0o40750, 0, 1000), USER, 5)
    assert cs.may(cs.HostDir(0o40701, 0, 0), USER, 1) and not cs.may(cs.HostDir(0o40701, 0, 0), USER, 5)


def test_a_run_dir_below_a_private_dir_in_the_working_dir_is_reached_through_a_mask():
    """The issue's case: root in /tmp, the store in a mktemp -d directory."""
    run = "/tmp/tmp.abc/20260101-000000-aaaaaa"
    mounts = cs.job_mounts(run, "/tmp")
    out, masks = cs.reachable(mounts, [], USER, run, _stat({"/tmp/tmp.abc"}))
    assert masks == ["/tmp/tmp.abc"]
    assert [m.target for m in out] == ["/tmp", run]
    assert cs.mask_skeleton("/tmp/tmp.abc", out) == ["20260101-000000-aaaaaa"]


def test_nothing_is_masked_when_every_directory_can_be_entered():
    run = "/tmp/store/r"
    out, masks = cs.reachable(cs.job_mounts(run, "/tmp"), [], USER, run, _stat(set()))
    assert masks == [] and [m.target for m in out] == ["/tmp", run]


def test_only_the_outermost_private_directory_is_masked():
    run = "/w/a/b/c/r"
    out, masks = cs.reachable(cs.job_mounts(run, "/w"), [], USER, run, _stat({"/w/a", "/w/a/b"}))
    assert masks == ["/w/a"] and cs.mask_skeleton("/w/a", out) == ["b/c/r"]


def test_data_seen_through_the_working_dir_under_a_mask_gets_its_own_mount():
    run, data = "/w/private/store/r", "/w/private/data.npz"
    mounts = cs.job_mounts(run, "/w", [data])
    assert [m.target for m in mounts] == ["/w", run]  # the data is seen through /w
    out, masks = cs.reachable(mounts, [data], USER, run, _stat({"/w/private"}, files={data}))
    assert masks == ["/w/private"]
    assert sorted(cs.mask_skeleton("/w/private", out)) == ["data.npz", "store/r"]
    assert any(m.target == data and m.read_only for m in out)


def test_a_mount_below_the_images_private_root_home_is_masked():
    out, masks = cs.reachable(cs.job_mounts("/s/r", "/root/proj"), [], USER, "/s/r", _stat(set()))
    assert masks == ["/root"] and cs.mask_skeleton("/root", out) == ["proj"]


def test_an_unreadable_working_dir_or_data_file_refuses_naming_it_and_the_fix():
    with pytest.raises(
        ConfigError,
        match=r"uid 1000, which cannot enter and read '/tmp/tmp.w' \(mode 0700.*"
        r"chmod o\+rx '/tmp/tmp.w'",
    ):
        cs.reachable(cs.job_mounts("/s/r", "/tmp/tmp.w"), [], USER, "/s/r", _stat({"/tmp/tmp.w"}))
    data = "/d/secret.npz"
    with pytest.raises(ConfigError, match=r"cannot read '/d/secret.npz'.*chmod o\+r"):
        cs.reachable(cs.job_mounts("/s/r", "/p", [data]), [data], USER, "/s/r", _stat(set(), unreadable={data}))


def test_the_run_dir_itself_is_lent_not_checked():
    run = "/s/r"
    out, masks = cs.reachable(cs.job_mounts(run, "/p"), [], USER, run, _stat({run}))
    assert masks == [] and [m.target for m in out] == ["/p", run]


def test_a_missing_path_is_left_to_the_daemon():
    run, extra = "/w/p/store/r", "/w/p/gone/data"
    mounts = cs.job_mounts(run, "/w", [extra])
    stat = _stat({"/w/p"})
    out, masks = cs.reachable(mounts, [extra], USER, run, lambda p: None if "/gone" in p else stat(p))
    assert masks == ["/w/p"] and any(m.target == extra for m in out)
