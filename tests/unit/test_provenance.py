"""Facts for metadata.json (`testbed.run.provenance`): package versions, git revision."""

from __future__ import annotations

from testbed.net.hoststate import parse_sysctl
from testbed.run.provenance import git_revision, parse_dpkg_status


def test_small_parsers(tmp_path):
    assert parse_sysctl("net.ipv4.tcp_rmem = 4096\t131072 6291456\nbad line\n") == {
        "net.ipv4.tcp_rmem": "4096\t131072 6291456"}
    status = ("Package: tshark\nStatus: install ok installed\nVersion: 4.0.17\n\n"
              "Package: mininet\nStatus: deinstall ok config-files\nVersion: 2.3.0-1\n\n"
              "Package: bash\nStatus: install ok installed\nVersion: 5.2\n")
    assert parse_dpkg_status(status) == {"tshark": "4.0.17"}
    (tmp_path / ".git" / "refs" / "heads").mkdir(parents=True)
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / ".git" / "refs" / "heads" / "main").write_text("abc123\n")
    assert git_revision(tmp_path) == "abc123"
    (tmp_path / ".git" / "refs" / "heads" / "main").unlink()
    (tmp_path / ".git" / "packed-refs").write_text("# pack\ndef456 refs/heads/main\n")
    assert git_revision(tmp_path) == "def456"
    assert git_revision(tmp_path / "nope") is None


def test_git_revision_of_a_linked_work_tree(tmp_path):
    """``git worktree add``: .git is a ``gitdir:`` file; the branch ref is in the main repo."""
    main = tmp_path / "repo" / ".git"
    (main / "refs" / "heads").mkdir(parents=True)
    (main / "refs" / "heads" / "topic").write_text("0123abcd\n")
    linked = main / "worktrees" / "wt"
    linked.mkdir(parents=True)
    (linked / "HEAD").write_text("ref: refs/heads/topic\n")
    (linked / "commondir").write_text("../..\n")
    tree = tmp_path / "wt"
    tree.mkdir()
    (tree / ".git").write_text(f"gitdir: {linked}\n")
    assert git_revision(tree) == "0123abcd"
    (linked / "HEAD").write_text("fedcba98\n")  # detached
    assert git_revision(tree) == "fedcba98"
    (tree / ".git").write_text("not a gitdir line\n")
    assert git_revision(tree) is None
