"""The rubric format (one clear line per problem, exit 2) and the safe intake of archives
and folders (links, devices, `..`, absolute names, size and file-count limits)."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from testbed.grade.intake import Entry, IntakeError, Limits, take_in
from testbed.grade.rubric import ASSIGNMENTS, AssignmentError, load_assignment

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", ["p0_mptcp_gain", "p0_handover", "p1_spray", "p2_cc"])
def test_shipped_assignments_load(name: str) -> None:
    a = load_assignment(name)
    assert a.max_points > 0 and a.specs and (ASSIGNMENTS / name / "questions.md").is_file()


def _assignment(tmp_path: Path, rubric: str) -> Path:
    folder = tmp_path / "hw"
    folder.mkdir()
    shutil.copy(ASSIGNMENTS / "p0_mptcp_gain" / "paths.toml", folder)
    (folder / "questions.md").write_text("# hw\n")
    (folder / "rubric.toml").write_text(rubric)
    return folder


GOOD_CHECK = """
[[check]]
name = "n"
sql = "SELECT 1"
expected = 1
points = 1
pass = "yes"
fail = "no"
"""


def test_rubric_problems_one_line_each(tmp_path: Path) -> None:
    folder = _assignment(tmp_path, 'title = "t"\n[[spec]]\nfile = "paths.toml"\n'
                         '[[check]]\nname = "a b"\nsql = "SELECT 1"\npoints = -1\n'
                         'pass = "p"\nfail = "f"\nexpectd = 3\n')
    with pytest.raises(AssignmentError) as exc:
        load_assignment(str(folder))
    lines = str(exc.value).splitlines()
    assert all(line.startswith(str(folder / "rubric.toml")) for line in lines)
    text = "\n".join(lines)
    assert "check[0].name" in text and "check[0].points" in text and "expectd" in text


def test_rubric_needs_expected_or_range_and_known_fixed_keys(tmp_path: Path) -> None:
    folder = _assignment(tmp_path, 'title = "t"\n[[spec]]\nfile = "paths.toml"\n'
                         + GOOD_CHECK.replace("expected = 1\n", ""))
    with pytest.raises(AssignmentError, match="either expected"):
        load_assignment(str(folder))
    (folder / "rubric.toml").write_text('title = "t"\n[[spec]]\nfile = "paths.toml"\n'
                                        'fixed = ["topology.pathz"]\n' + GOOD_CHECK)
    with pytest.raises(AssignmentError, match=r"topology\.pathz"):
        load_assignment(str(folder))


@pytest.mark.parametrize("old,new,where", [
    ("points = 1\n", "points = 1e400\n", "check[0].points"),   # inf: grade crashed
    ("expected = 1\n", "expected = nan\n", "check[0].expected"),
    ("expected = 1\n", "expected = inf\n", "check[0].expected"),
    ("points = 1\n", 'points = "1"\n', "check[0].points"),     # a string, not a number
    ('fail = "no"\n', 'fail = "no"\nhidden = "off"\n', "check[0].hidden"),  # was: shown
    ("expected = 1\n", "min = 0\nmax = 2\nrelative = true\n", "go with expected"),
    ("expected = 1\n", "min = 0\ntolerance = 0.5\n", "go with expected"),
])
def test_rubric_values_are_finite_and_of_their_type(tmp_path: Path, old: str, new: str,
                                                     where: str) -> None:
    """A rubric value that is no finite number, of another type, or a tolerance beside a
    range is one line and exit 2 (`testbed grade` crashed on points = 1e400, and read
    hidden = "off" as false)."""
    assert old in GOOD_CHECK
    folder = _assignment(tmp_path, 'title = "t"\n[[spec]]\nfile = "paths.toml"\n'
                         + GOOD_CHECK.replace(old, new))
    with pytest.raises(AssignmentError, match=re.escape(where)):
        load_assignment(str(folder))


def test_cli_bad_rubric_exit_2(tmp_path: Path) -> None:
    folder = _assignment(tmp_path, 'title = "t"\n')
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "check", "--assignment",
                          str(folder), str(tmp_path)], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("error: ") and "Traceback" not in res.stderr


def _zip(path: Path, members: dict[str, bytes], link: str | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        if link:
            info = zipfile.ZipInfo(link)
            info.external_attr = (0o120777 << 16)
            zf.writestr(info, "/etc/passwd")
    return path


@pytest.mark.parametrize("members,link,why", [
    ({"/abs.txt": b"x"}, None, "absolute"),
    ({"a/../../up.txt": b"x"}, None, "'..'"),
    ({"ok.txt": b"x"}, "lnk", "symbolic link"),
])
def test_zip_refusals(tmp_path: Path, members: dict, link: str | None, why: str) -> None:
    z = _zip(tmp_path / "s.zip", members, link)
    with pytest.raises(IntakeError, match=why):
        take_in(Entry("s", z), tmp_path / "out")
    assert not (tmp_path / "up.txt").exists()


def _tar(path: Path, kind: bytes, name: str = "x") -> Path:
    with tarfile.open(path, "w:gz") as tf:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = "/etc/passwd"
        tf.addfile(info, io.BytesIO(b""))
    return path


@pytest.mark.parametrize("kind,why", [(tarfile.SYMTYPE, "symbolic link"),
                                      (tarfile.LNKTYPE, "hard link"),
                                      (tarfile.CHRTYPE, "device"),
                                      (tarfile.FIFOTYPE, "FIFO")])
def test_tar_refusals(tmp_path: Path, kind: bytes, why: str) -> None:
    with pytest.raises(IntakeError, match=why):
        take_in(Entry("s", _tar(tmp_path / "s.tar.gz", kind)), tmp_path / "out")


def _damaged_zip(path: Path, encrypted: bool = False) -> Path:
    """A zip whose last member's deflate data is garbage (or which says it is encrypted)."""
    import struct
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("run/spec.toml", b"x")
        zf.writestr("run/zz.txt", b"hello" * 100, compress_type=zipfile.ZIP_DEFLATED)
    b = bytearray(path.read_bytes())
    i = b.rfind(b"PK\x03\x04")
    n, m = struct.unpack_from("<HH", b, i + 26)
    if encrypted:  # the flag bit, in the local and the central header
        b[i + 6] |= 1
        c = b.rfind(b"PK\x01\x02")
        b[c + 8] |= 1
    else:
        b[i + 30 + n + m:i + 38 + n + m] = b"\xff" * 8
    path.write_bytes(bytes(b))
    return path


@pytest.mark.parametrize("encrypted,why", [(False, "run/zz.txt: damaged, cannot be "
                                                   "extracted"),
                                           (True, "run/zz.txt: encrypted")])
def test_a_damaged_or_encrypted_member_is_one_line(tmp_path: Path, encrypted: bool,
                                                   why: str) -> None:
    z = _damaged_zip(tmp_path / "s.zip", encrypted)
    with pytest.raises(IntakeError, match=why):
        take_in(Entry("s", z), tmp_path / "out")


@pytest.mark.parametrize("names", [("a/b", "a/b"), ("a", "a/b"), ("a/b", "a")])
def test_a_member_twice_or_as_file_and_folder_is_refused(tmp_path: Path,
                                                         names: tuple[str, str]) -> None:
    z = tmp_path / "s.zip"
    with zipfile.ZipFile(z, "w") as zf, pytest.warns(UserWarning, match="Duplicate") \
            if names[0] == names[1] else _nothing():
        for n in names:
            zf.writestr(n, b"x")
    with pytest.raises(IntakeError, match=r"given (twice|as a file and as a folder)") as exc:
        take_in(Entry("s", z), tmp_path / "out")
    assert str(tmp_path) not in str(exc.value)  # no temporary path in the line


def _nothing():
    import contextlib
    return contextlib.nullcontext()


def test_a_path_too_deep_is_refused_not_a_recursion_error(tmp_path: Path) -> None:
    deep = tmp_path / "alice"
    d = deep
    for _ in range(40):
        d = d / "d"
    d.mkdir(parents=True)
    (d / "x").write_text("x")
    with pytest.raises(IntakeError, match="more than 32 folders deep"):
        take_in(Entry("alice", deep), tmp_path / "out")
    with tarfile.open(tmp_path / "s.tgz", "w:gz") as tf:
        info = tarfile.TarInfo("static/" + "d/" * 1500 + "x")
        tf.addfile(info, io.BytesIO(b""))
    with pytest.raises(IntakeError, match="more than 32 folders deep"):
        take_in(Entry("s", tmp_path / "s.tgz"), tmp_path / "out2")


def test_limits_count_what_is_written(tmp_path: Path) -> None:
    z = _zip(tmp_path / "big.zip", {"a.bin": b"\0" * 5000, "b.bin": b"\0" * 10})
    # the limit in the unit the option takes (--max-mb), not in bytes
    with pytest.raises(IntakeError, match=r"more than 0\.00390625 MB once extracted "
                                          r"\(at a\.bin; the limit is testbed grade --max-mb\)"):
        take_in(Entry("s", z), tmp_path / "o1", Limits(max_bytes=4096))
    with pytest.raises(IntakeError, match=r"more than 1 MB once extracted"):
        take_in(Entry("s", _zip(tmp_path / "big2.zip", {"a.bin": b"\0" * (1 << 20),
                                                        "b.bin": b"\0"})),
                tmp_path / "o3", Limits(max_bytes=1 << 20))
    with pytest.raises(IntakeError, match="more than 1 files"):
        take_in(Entry("s", z), tmp_path / "o2", Limits(max_files=1))


def test_folder_with_a_link_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "alice"
    (src / "run").mkdir(parents=True)
    (src / "run" / "spec.toml").write_text("x")
    (src / "run" / "secret").symlink_to("/etc/passwd")
    with pytest.raises(IntakeError, match="symbolic link"):
        take_in(Entry("alice", src), tmp_path / "out")
    (src / "run" / "secret").unlink()
    got = take_in(Entry("alice", src), tmp_path / "out")
    assert (got / "run" / "spec.toml").read_text() == "x"


def test_students_whose_names_clean_up_alike_keep_a_page_each(tmp_path: Path) -> None:
    """``x y`` and ``x_y`` both clean up to ``x_y``: the second's page overwrote the
    first's (one ``x_y.html``, two totals rows named ``x_y``).  Every entry gets a name
    of its own; ``alice`` beside ``alice.zip`` still keeps the suffix."""
    from testbed.grade.intake import entries

    subs = tmp_path / "subs"
    for name in ("x y", "x_y", "x_y-2", "alice"):
        (subs / name).mkdir(parents=True)
    (subs / "alice.zip").write_bytes(b"")
    names = [e.student for e in entries(subs)]
    assert len(set(names)) == len(names) == 5, names
    assert "alice" in names and "alice.zip" in names and "x_y" in names, names


@pytest.mark.parametrize("own", ["metadata.json", "summary.parquet"])
def test_one_students_results_are_not_taken_for_a_class(tmp_path: Path, own: str) -> None:
    """`testbed grade` given one student's results folder (or one run) graded each of its
    run folders as a student, each with an error row.  It is refused with one line that
    names what the folder is and the command for one student's results."""
    from testbed.core.errors import InputError
    from testbed.grade.intake import entries

    results = tmp_path / "results"
    (results / "run-0001").mkdir(parents=True)
    (results / own).write_bytes(b"")
    with pytest.raises(InputError, match=f"a results folder \\(it holds {own}\\).*testbed check"):
        entries(results)


def test_a_rubric_that_is_no_file_is_named_as_such(tmp_path: Path) -> None:
    """A FIFO or a folder named rubric.toml was reported as "no rubric.toml"."""
    folder = _assignment(tmp_path, 'title = "t"\n[[spec]]\nfile = "paths.toml"\n' + GOOD_CHECK)
    (folder / "rubric.toml").unlink()
    os.mkfifo(folder / "rubric.toml")
    with pytest.raises(AssignmentError, match=r"rubric\.toml: not a regular file"):
        load_assignment(str(folder))
    (folder / "rubric.toml").unlink()
    with pytest.raises(AssignmentError, match=r"hw: no rubric\.toml"):
        load_assignment(str(folder))


def test_a_number_toml_reads_as_infinity_says_so(tmp_path: Path) -> None:
    """``min = 1e400`` was reported as "inf must be a finite number": a value the
    instructor never wrote."""
    folder = _assignment(tmp_path, 'title = "t"\n[[spec]]\nfile = "paths.toml"\n'
                         + GOOD_CHECK.replace("expected = 1\n", "min = 1e400\n"))
    with pytest.raises(AssignmentError, match=r"check\[0\]\.min: .*such as 1e400, reads as "
                       "infinity"):
        load_assignment(str(folder))
