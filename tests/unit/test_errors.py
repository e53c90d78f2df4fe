"""testbed.core.errors: messages made fit for one line."""

from __future__ import annotations


def test_one_line_keeps_what_follows_a_colon():
    import io
    import tarfile

    from testbed.core.errors import one_line

    try:
        with tarfile.open(fileobj=io.BytesIO(b"garbage" * 10)):
            pass
    except tarfile.TarError as exc:
        line = one_line(exc)
    assert "\n" not in line and "truncated header" in line  # not cut after "successfully:"
    assert one_line(ValueError("")) == "ValueError"
    assert len(one_line(ValueError("x" * 500))) == 300
