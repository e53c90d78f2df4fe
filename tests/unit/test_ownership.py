"""Results made under sudo belong to the user who ran sudo, readable; links never followed.

Ownership is checked with `os.lstat` after a fake ``SUDO_UID``/``SUDO_GID`` (12345); giving
a file to another user needs root, as the CI's unit tests run.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from test_results import FakeRunner, plans
from typer.testing import CliRunner

from testbed.cli.app import app
from testbed.core import ownership
from testbed.core.errors import InputError
from testbed.core.ownership import hand_over, invoking_user
from testbed.core.safefiles import atomic_write_text
from testbed.results.bundle import LOCK, locked
from testbed.run.sweep import run_sweep

UID, GID = 12345, 12346
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user "
                             "needs root (the CI runs unit tests as root)")


@pytest.fixture
def sudo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUDO_UID", str(UID))
    monkeypatch.setenv("SUDO_GID", str(GID))


def owner(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def tree(base: Path) -> Path:
    """A bundle-like folder as root leaves it: 0600 files, a 0700 folder, a script."""
    top = base / "out"
    (top / "run" / "pcap").mkdir(parents=True)
    (top / "run" / "pcap").chmod(0o700)
    for rel in ("summary.parquet", "run/metadata.json", "run/pcap/client-eth0.pcap"):
        fd = os.open(top / rel, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
    (top / "run" / "commands.sh").write_text("#!/bin/sh\n")
    (top / "run" / "commands.sh").chmod(0o700)
    return top


def test_atomic_writes_are_readable(tmp_path: Path) -> None:
    atomic_write_text(tmp_path / "a.json", "{}")
    assert stat.S_IMODE(os.lstat(tmp_path / "a.json").st_mode) == 0o644


def test_only_root_under_sudo_hands_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    top = tree(tmp_path)
    before = {p: owner(p) for p in top.rglob("*")}
    monkeypatch.delenv("SUDO_UID", raising=False)
    monkeypatch.delenv("SUDO_GID", raising=False)
    assert invoking_user() is None and hand_over(top) == 0  # root logged in as root
    for uid in ("0", "x", "-3"):  # sudo by root itself, or a malformed value
        monkeypatch.setenv("SUDO_UID", uid)
        monkeypatch.setenv("SUDO_GID", "0")
        assert invoking_user() is None and hand_over(top) == 0
    monkeypatch.setenv("SUDO_UID", str(UID))
    monkeypatch.setattr(ownership.os, "geteuid", lambda: 1000)  # a normal user
    assert invoking_user() is None and hand_over(top) == 0
    assert {p: owner(p) for p in top.rglob("*")} == before


@as_root
def test_the_tree_goes_to_the_user_readable(tmp_path: Path, sudo: None) -> None:
    top = tree(tmp_path)
    assert hand_over(top) == 7  # 3 folders, 4 files
    assert owner(top) == owner(top / "run") == owner(top / "run" / "pcap") == (UID, GID, 0o755)
    for rel in ("summary.parquet", "run/metadata.json", "run/pcap/client-eth0.pcap"):
        assert owner(top / rel) == (UID, GID, 0o644), rel
    assert owner(top / "run" / "commands.sh") == (UID, GID, 0o755)
    assert hand_over(top) == 0  # what is the user's already is left alone


@as_root
def test_only_what_the_command_made_or_changed_is_handed_over(tmp_path: Path, sudo: None
                                                             ) -> None:
    """`sudo testbed report /etc` (refused) handed every root-owned file under /etc to the
    user on its way out; now only entries changed since the command started go."""
    import time

    top = tree(tmp_path)
    start = time.time() + 5  # as if the command started after all of that was made
    assert hand_over(top, since=start) == 0
    assert owner(top / "run" / "metadata.json")[0] == 0
    start = time.time() - 1
    (top / "run" / "metadata.json").write_text("{}")  # what the command writes now
    assert hand_over(top, since=start) >= 1
    assert owner(top / "run" / "metadata.json") == (UID, GID, 0o644)


@as_root
def test_links_and_foreign_files_are_never_followed(tmp_path: Path, sudo: None) -> None:
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    secret = outside / "secret"
    secret.write_text("root's")
    secret.chmod(0o600)
    (outside / "dir").chmod(0o700)
    top = tree(tmp_path)
    (top / "run" / "pcap" / "x.pcap").symlink_to(secret)
    (top / "run" / "logs").symlink_to(outside / "dir")
    os.link(secret, top / "run" / "hard.json")  # a hard link: two names, one file
    os.mkfifo(top / "run" / "fifo")
    other = top / "run" / "other.txt"
    other.write_text("")
    os.chown(other, 4242, 4242)
    other.chmod(0o600)
    frozen = {p: owner(p) for p in (secret, outside / "dir", top / "run" / "pcap" / "x.pcap",
                                    top / "run" / "logs", top / "run" / "fifo", other)}
    hand_over(top)
    assert {p: owner(p) for p in frozen} == frozen
    assert owner(top / "run" / "metadata.json") == (UID, GID, 0o644)


@as_root
def test_root_made_folders_above_inside_the_users_folder(tmp_path: Path, sudo: None) -> None:
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, UID, GID)
    top = tree(home / "results" / "p0")  # results/ and p0/ made by root, as mkdir -p does
    hand_over(top)
    assert owner(home / "results")[:2] == owner(home / "results" / "p0")[:2] == (UID, GID)
    assert owner(tmp_path)[0] == 0  # above the user's folder: untouched


@as_root
def test_nothing_above_when_no_folder_above_is_the_users(tmp_path: Path, sudo: None) -> None:
    top = tree(tmp_path / "results")
    hand_over(top)
    assert owner(top)[:2] == (UID, GID)
    assert owner(tmp_path / "results")[0] == 0 and owner(tmp_path)[0] == 0


@as_root
def test_the_lock_of_a_handed_over_folder_still_locks(tmp_path: Path, sudo: None) -> None:
    with locked(tmp_path / "out"):
        pass
    hand_over(tmp_path / "out")
    assert owner(tmp_path / "out" / LOCK)[:2] == (UID, GID)
    with locked(tmp_path / "out"):  # root under sudo again, on the user's lock file
        pass
    os.chown(tmp_path / "out" / LOCK, 4242, 4242)  # someone else's: refused
    with pytest.raises(InputError, match="not a regular file owned by this user"), \
            locked(tmp_path / "out"):
        pass


@as_root
def test_report_under_sudo_leaves_the_users_files(tmp_path: Path, sudo: None) -> None:
    """`testbed report DIR` as a command: every file it wrote (report.html, figures) is
    the user's afterwards; what root made before it (here runs made without sudo) is
    not the report's to give away."""
    import time

    out = tmp_path / "out"
    run_sweep(plans()[:2], out, FakeRunner())
    before = {p: owner(p) for p in out.rglob("*")}
    time.sleep(2.5)  # the report command starts later than the runs' files were made
    res = CliRunner().invoke(app, ["report", str(out)], env={"SUDO_UID": str(UID),
                                                             "SUDO_GID": str(GID)})
    assert res.exit_code == 0, res.output
    assert (out / "report.html").is_file()
    made = [out, out / "report.html", *(out / "figures").rglob("*")]
    assert {owner(p)[:2] for p in made} == {(UID, GID)}, \
        [p for p in made if owner(p)[:2] != (UID, GID)]
    assert all(owner(p)[2] in (0o644, 0o755) for p in made)
    specs = sorted(out.glob("*/spec.toml"))
    assert specs and all(owner(p) == before[p] and owner(p)[0] == 0 for p in specs)
