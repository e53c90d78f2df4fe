"""Malformed specs: exit code 2 and one line per problem naming the file and the key."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from typer.testing import CliRunner

from testbed.cli.app import app

BASE: dict[str, Any] = {
    "name": "mini",
    "duration": "10s",
    "seed": 1,
    "topology": {"kind": "multipath", "paths": [
        {"name": "wifi", "bw": "4Mbit", "delay": "10ms", "queue": 100},
        {"name": "cell", "bw": "4Mbit", "delay": "60ms", "jitter": "5ms", "loss": "0.5%"}]},
    "transport": {"protocol": "mptcp", "cc": "cubic"},
    "workload": [{"kind": "bulk", "src": "client", "dst": "server", "size": "2MB"},
                 {"kind": "ping", "src": "client", "dst": "server", "interval": "200ms",
                  "protocol_hint": None}],
    "schedule": [{"at": "5s", "link": "wifi", "down": True}],
}
del BASE["workload"][1]["protocol_hint"]

FATTREE: dict[str, Any] = {
    "name": "ft", "duration": "10s",
    "topology": {"kind": "fattree", "k": 4, "bw": "10Mbit"},
    "controller": {"kind": "ecmp"},
    "workload": [{"kind": "flows", "pattern": "incast", "src": ["S0", "S1"], "dst": "S15",
                  "size": "200KB"}],
}


def _set(path: str, value: Any, base: dict[str, Any] = BASE) -> Callable[[], dict]:
    def make() -> dict:
        data = copy.deepcopy(base)
        node: Any = data
        parts = path.split(".")
        for p in parts[:-1]:
            node = node[int(p)] if p.isdigit() else node.setdefault(p, {})
        last = parts[-1]
        if value is _DELETE:
            del node[int(last) if last.isdigit() else last]
        elif last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value
        return data
    return make


_DELETE = object()

CASES: list[tuple[str, Callable[[], dict], str]] = [
    ("rate in bytes/s", _set("topology.paths.1.bw", "4Mbps"), "topology.paths[1].bw:"),
    ("rate without unit", _set("topology.paths.0.bw", 4000000), "topology.paths[0].bw:"),
    ("typo in a path key", _set("topology.paths.0.bandwidth", "4Mbit"),
     "topology.paths[0].bandwidth: unknown key"),
    ("typo at top level", _set("duraton", "10s"), "duraton: unknown key"),
    ("unknown topology kind", _set("topology.kind", "star"), "topology.kind: unknown kind"),
    ("topology kind missing", _set("topology.kind", _DELETE), "topology.kind: missing"),
    ("unknown workload kind", _set("workload.0.kind", "iperf"),
     "workload[0].kind: unknown kind"),
    ("workload kind missing", _set("workload.0.kind", _DELETE), "workload[0].kind: missing"),
    ("negative delay", _set("topology.paths.0.delay", "-5ms"), "topology.paths[0].delay:"),
    ("zero rate", _set("topology.paths.0.bw", "0Mbit"), "topology.paths[0].bw:"),
    ("loss above 100%", _set("topology.paths.1.loss", "150%"), "topology.paths[1].loss:"),
    ("loss without %", _set("topology.paths.1.loss", "0.5"), "topology.paths[1].loss:"),
    ("duration not a duration", _set("duration", "ten seconds"), "duration:"),
    ("duration missing", _set("duration", _DELETE), "duration: missing"),
    ("negative queue", _set("topology.paths.0.queue", -1), "topology.paths[0].queue:"),
    ("zero repetitions", _set("repetitions", 0), "repetitions:"),
    ("repetitions not an integer", _set("repetitions", "three"), "repetitions:"),
    ("unknown protocol", _set("transport.protocol", "quic"), "transport.protocol:"),
    ("bad size unit", _set("workload.0.size", "2 megabytes"), "workload[0].size:"),
    ("unknown host in a workload", _set("workload.0.src", "laptop"), "workload[0].src:"),
    ("src equals dst", _set("workload.0.dst", "client"), "workload[0].dst:"),
    ("via an unknown path", _set("workload.1.via", "lte"), "workload[1].via:"),
    ("schedule for a missing link", _set("schedule.0.link", "lte"), "schedule[0].link:"),
    ("schedule after the end", _set("schedule.0.at", "30s"), "schedule[0].at:"),
    ("schedule that changes nothing", _set("schedule.0.down", _DELETE), "schedule[0]:"),
    ("duplicate path names", _set("topology.paths.1.name", "wifi"),
     "topology.paths[1].name: duplicate"),
    ("controller on multipath", _set("controller.kind", "ecmp"), "controller.kind:"),
    ("unknown controller kind", _set("controller.kind", "hedera"), "controller.kind:"),
    ("no workloads", _set("workload", []), "workload:"),
    ("bad name", _set("name", "my experiment"), "name:"),
    ("path name with capitals", _set("topology.paths.0.name", "WiFi"),
     "topology.paths[0].name:"),
    ("workload start after the end", _set("workload.0.start", "12s"), "workload[0].start:"),
    ("size and duration both", _set("workload.0.duration", "5s"), "workload[0].duration:"),
    ("sweep over an unknown key", _set("sweep", {"transport.ccc": ["reno", "cubic"]}),
     "transport.ccc: unknown key"),
    ("sweep over a missing list index", _set("sweep", {"topology.paths.3.bw": ["1Mbit"]}),
     'sweep."topology.paths.3.bw"'),
    ("sweep with a bad value", _set("sweep", {"topology.paths.1.bw": ["2Mbit", "2Mbps"]}),
     "topology.paths[1].bw:"),
    ("sweep value not a list", _set("sweep", {"transport.cc": "reno"}),
     'sweep."transport.cc"'),
    ("sweep over the name", _set("sweep", {"name": ["a", "b"]}), 'sweep."name"'),
    ("sweep with a malformed key", _set("sweep", {"transport..cc": ["reno"]}),
     'sweep."transport..cc"'),
    ("odd fat-tree k", _set("topology.k", 3, FATTREE), "topology.k:"),
    ("fat-tree without a controller", _set("controller.kind", "none", FATTREE),
     "controller.kind:"),
    ("unknown fat-tree host", _set("workload.0.dst", "S16", FATTREE), "workload[0].dst:"),
    ("incast count above senders", _set("workload.0.count", 3, FATTREE),
     "workload[0].count:"),
    ("pattern option it does not use", _set("workload.0.hosts", ["S1", "S2"], FATTREE),
     "workload[0].hosts:"),
    ("bad fat-tree link name", lambda: {**copy.deepcopy(FATTREE), "schedule": [
        {"at": "1s", "link": "E0-X9", "down": True}]}, "schedule[0].link:"),
    ("via on a fat-tree", lambda: {**copy.deepcopy(FATTREE), "workload": [
        {"kind": "bulk", "src": "S0", "dst": "S1", "via": "a"}]}, "workload[0].via:"),
    ("via with an MPTCP flow", _set("workload.0.via", "wifi"), "workload[0].via:"),
    ("capture on an unknown host", _set("capture.hosts", ["router"]), "capture.hosts[0]:"),
    ("snaplen too small", _set("capture.snaplen", 10), "capture.snaplen:"),
    ("table given as a string", _set("transport", "mptcp"), "transport:"),
]


def _invoke(tmp_path: Path, data: dict | None, text: str | None = None, extra=()):
    spec = tmp_path / "spec.toml"
    spec.write_text(text if text is not None else tomli_w.dumps(data))
    result = CliRunner().invoke(app, ["run", str(spec), "--dry-run", *extra])
    return spec, result


def _check_one_line(spec: Path, result, key: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    err = result.stderr
    assert "Traceback" not in err + result.stdout
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {spec}: "), lines[0]
    assert key in lines[0], lines[0]


def test_base_specs_are_valid():
    from testbed.spec.load import validate_spec

    validate_spec(copy.deepcopy(BASE))
    validate_spec(copy.deepcopy(FATTREE))


def test_there_are_at_least_25_cases():
    assert len(CASES) >= 25


@pytest.mark.parametrize(("what", "make", "key"), CASES, ids=[c[0] for c in CASES])
def test_malformed_spec(tmp_path, what, make, key):
    spec, result = _invoke(tmp_path, make())
    _check_one_line(spec, result, key)


def test_toml_syntax_error(tmp_path):
    spec, result = _invoke(tmp_path, None, 'name = "x"\nduration = 10s\n')
    _check_one_line(spec, result, "not valid TOML")


def test_missing_file(tmp_path):
    result = CliRunner().invoke(app, ["run", str(tmp_path / "nope.toml"), "--dry-run"])
    assert result.exit_code == 2
    assert "no such spec file" in result.stderr


def test_unreadable_spec_files_are_one_clear_line(tmp_path):
    """Not UTF-8, a folder, a FIFO, too large: one line saying what to do (they were
    `(UnicodeDecodeError)`, `(IsADirectoryError)`, a hang and 280 MB of memory)."""
    import os

    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'name = "\xff"\n')
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    big = tmp_path / "big.toml"
    big.write_text('description = "' + "x" * (1 << 20) + '"\n')
    cases = {bad: "not UTF-8 text (byte 8); save the spec as UTF-8",
             tmp_path: "a folder, not a spec file (give the .toml file)",
             fifo: "not a regular file (a device, FIFO or socket); give the spec's .toml file",
             big: "larger than 1024 KiB; a spec is a few KiB (long schedules belong in a "
                  "trace file, docs/spec.md)"}
    for path, why in cases.items():
        result = CliRunner().invoke(app, ["run", str(path), "--dry-run"])
        assert result.exit_code == 2, result.output
        assert result.stderr.strip() == f"error: {path}: {why}", result.stderr


def test_a_byte_order_mark_is_not_part_of_the_spec(tmp_path):
    spec = tmp_path / "bom.toml"
    spec.write_bytes(b"\xef\xbb\xbf" + tomli_w.dumps(BASE).encode())
    result = CliRunner().invoke(app, ["run", str(spec), "--dry-run"])
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize(("override", "key"), [
    ("transport.cc", "--set transport.cc: expected KEY=VALUE"),
    ("topology.paths.7.bw=1Mbit", "--set topology.paths.7.bw:"),
    ("topology.paths.0.bw=1Mbps", '--set topology.paths.0.bw: "1Mbps" is not a rate; '
                                  'did you mean "1Mbit"?'),
    ("duraton=10s", "--set duraton: unknown key; did you mean 'duration'?"),
    ("repetitions=1001", "--set repetitions: 1001 is more than 1000; use 1 .. 1000"),
    # a table only the override made: it named the spec file
    ("transprot.cc=cubic", "--set transprot.cc: transprot: unknown key; did you mean "
                           "'transport'?"),
    ("workload.0.dst=sever", "--set workload.0.dst: no host named 'sever'; "
                             "did you mean 'server'?"),
    ("sweep.x=[1]", "--set sweep.x:"),
])
def test_bad_override(tmp_path, override, key):
    _, result = _invoke(tmp_path, copy.deepcopy(BASE), extra=["--set", override])
    assert result.exit_code == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert key in result.stderr


THREE_MISTAKES = """\
name = "three"
duration = "10s"

[topology]
kind = "multipath"
paths = [{ name = "wifi", bw = "10 mbps", delya = "20ms" }]

[[workload]]
kind = "bulk"
src = "client"
dst = "sever"
size = "1MB"
"""


def test_three_mistakes_give_three_lines(tmp_path):
    spec, result = _invoke(tmp_path, None, THREE_MISTAKES)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.splitlines() == [
        f'error: {spec}: topology.paths[0].bw: "10 mbps" is not a rate; '
        'did you mean "10Mbit"?',
        f"error: {spec}: topology.paths[0].delya: unknown key; did you mean 'delay'?",
        f"error: {spec}: workload[0].dst: no host named 'sever'; did you mean 'server'?",
    ]


def test_problems_in_a_spec_and_in_set_are_told_apart(tmp_path):
    data = copy.deepcopy(BASE)
    data["workload"][0]["dst"] = "sever"
    spec, result = _invoke(tmp_path, data, extra=["--set", "transport.protocol=mptpc"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: --set transport.protocol: \"mptpc\" is not allowed; did you mean 'mptcp'?",
        f"error: {spec}: workload[0].dst: no host named 'sever'; did you mean 'server'?",
    ]


def test_a_removed_bad_value_does_not_invent_a_second_problem(tmp_path):
    # down = "maybe" is wrong; the event without it would "change nothing": not reported
    data = copy.deepcopy(BASE)
    data["schedule"][0]["down"] = "maybe"
    spec, result = _invoke(tmp_path, data)
    _check_one_line(spec, result, "schedule[0].down:")


def test_every_cross_key_problem_at_once(tmp_path):
    data = copy.deepcopy(BASE)
    data["workload"][0]["src"] = "laptop"
    data["schedule"][0]["link"] = "wfi"
    data["controller"] = {"kind": "ecmp"}
    _, result = _invoke(tmp_path, data)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 3, lines
    assert [line.split(": ")[2] for line in lines] == [
        "controller.kind", "workload[0].src", "schedule[0].link"]
    assert "did you mean 'wifi'?" in lines[2]


@pytest.mark.parametrize(("value", "what", "guess"), [
    ("10 mbps", "rate", "10Mbit"), ("2.5Gbps", "rate", "2.5Gbit"), (4000000, "rate", "4Mbit"),
    ("5 sec", "duration", "5s"), (10, "duration", "10s"), ("2 megabytes", "size", "2MB"),
    ("0.5", "percentage", "0.5%"), ("fast", "rate", None), (True, "rate", None),
    # below 1000 no bare count of bit/s is a link's rate (it suggested "10bit")
    (10, "rate", "10Mbit"), (999, "rate", "999Mbit"), (1000, "rate", "1kbit"),
])
def test_suggest_quantity(value, what, guess):
    from testbed.spec.quantities import suggest_quantity

    assert suggest_quantity(value, what) == guess


@pytest.mark.parametrize(("path", "value", "line"), [
    ("name", "my experiment", 'name: "my experiment" is not a valid name; '
                              'did you mean "my-experiment"?'),
    ("topology.paths.0.name", "WiFi", 'topology.paths[0].name: "WiFi" is not a valid name; '
                                      'did you mean "wifi"?'),
])
def test_a_bad_name_gets_a_corrected_one(tmp_path, path, value, line):
    spec, result = _invoke(tmp_path, _set(path, value)())
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {spec}: {line} (")


@pytest.mark.parametrize(("path", "value", "words"), [
    # a congestion control's name and a path's share one pattern; each gets its own
    # words (a bad cc was told to look like 'wifi' or 'lte')
    ("transport.cc", "../etc", "use a kernel name in lower case, e.g. 'cubic' or 'reno'"),
    ("transport.cc", "", "use a kernel name in lower case, e.g. 'cubic' or 'reno'"),
    ("topology.paths.0.name", "", "starting with a letter (e.g. 'wifi', 'lte')"),
])
def test_a_bad_name_is_told_what_names_of_its_kind_look_like(tmp_path, path, value, words):
    _spec, result = _invoke(tmp_path, _set(path, value)())
    assert result.exit_code == 2
    assert words in result.stderr.splitlines()[0], result.stderr


@pytest.mark.parametrize(("edit", "extra", "line"), [
    (None, ["--set", "name=123"], '--set name: 123 is not a string; put it in quotes: "123"'),
    (None, ["--set", "name=2024-01-01"],
     '--set name: 2024-01-01 is not a string; put it in quotes: "2024-01-01"'),
    ({"sweep": {"transport": {"cc": ["reno", "cubic"]}}}, [],
     'SPEC: sweep."transport": a table, not a list: a dotted key in [sweep] must be quoted, '
     'e.g. "transport.cc" = [...]'),
    ({"repetitions": 10**25}, [],
     f"SPEC: repetitions: {10**25} is more than 1000; use 1 .. 1000"),
    ({"workload": [{"kind": "ping", "src": "client", "dst": "server", "interval": "1ms"}]},
     [], "SPEC: workload[0].interval: '1ms' is out of range; use 10ms .. 604800s (a week)"),
])
def test_messages_say_how_to_fix(tmp_path, edit, extra, line):
    """From a docs-only review: each said what was wrong but not how to fix it (or named
    the wrong limit, or a unit-less bound)."""
    data = copy.deepcopy(BASE)
    data.update(edit or {})
    spec, result = _invoke(tmp_path, data, extra=extra)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == "error: " + line.replace("SPEC", str(spec)), result.stderr
