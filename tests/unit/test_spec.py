"""The spec models: parsing into base units, defaults, round trips through TOML."""

from __future__ import annotations

import copy

import pytest

from testbed.core.compat import tomllib
from testbed.core.errors import SpecError
from testbed.core.units import parse_duration
from testbed.spec.experiment import Experiment
from testbed.spec.load import spec_to_toml, validate_spec
from testbed.spec.model import BulkWorkload, FatTreeTopology, FlowsWorkload, MultipathTopology
from testbed.spec.problems import describe_validation_error, dotted
from testbed.spec.quantities import format_duration_exact, format_rate_exact, format_size_exact

SPEC = {
    "name": "wifi-3g",
    "duration": "30s",
    "seed": 7,
    "repetitions": 3,
    "topology": {"kind": "multipath", "paths": [
        {"name": "wifi", "bw": "4Mbit", "delay": "10ms", "queue": 100},
        {"name": "cell", "bw": "384kbit", "delay": "60ms", "jitter": "5ms", "loss": "0.5%"}]},
    "schedule": [{"at": "12s", "link": "wifi", "down": True},
                 {"at": "20s", "link": "cell", "bw": "2Mbit", "delay": "25us"}],
    "transport": {"protocol": "mptcp", "cc": "cubic", "rmem": "64KiB"},
    "workload": [
        {"kind": "bulk", "src": "client", "dst": "server", "size": "20MB"},
        {"kind": "bulk", "src": "client", "dst": "server", "start": "5s", "via": "wifi",
         "protocol": "tcp", "duration": "10s"},
        {"kind": "cbr", "src": "server", "dst": "client", "rate": "1Mbit", "via": "cell"},
        {"kind": "ping", "src": "client", "dst": "server", "interval": "200ms"},
    ],
    "capture": {"snaplen": 96},
    "sweep": {"transport.cc": ["reno", "cubic"]},
}


def test_units_become_base_numbers():
    exp = validate_spec(copy.deepcopy(SPEC))
    topo = exp.topology
    assert isinstance(topo, MultipathTopology)
    assert topo.paths[0].bw == 4_000_000
    assert topo.paths[1].bw == 384_000
    assert topo.paths[0].delay == pytest.approx(0.010)
    assert topo.paths[1].loss == pytest.approx(0.5)
    assert topo.paths[0].queue == 100
    assert exp.transport.rmem == 65536
    assert exp.duration == 30.0
    assert isinstance(exp.workload[0], BulkWorkload)
    assert exp.workload[0].size == 20_000_000
    assert exp.workload[2].rate == 1_000_000
    assert exp.workload[3].interval == pytest.approx(0.2)
    assert exp.schedule[1].changes() == {"bw": 2_000_000, "delay": pytest.approx(25e-6)}
    assert exp.schedule[0].changes() == {"down": True}


def test_defaults():
    exp = validate_spec(copy.deepcopy(SPEC))
    assert exp.controller_kind() == "none"
    assert exp.capture.enabled and exp.sampler.enabled
    assert exp.sampler.interval == pytest.approx(0.1)
    assert exp.repetition_numbers() == [1, 2, 3]
    assert exp.workload_name(0) == "bulk0"
    assert exp.workload_name(3) == "ping3"


def test_models_are_frozen():
    exp = validate_spec(copy.deepcopy(SPEC))
    with pytest.raises(Exception):  # noqa: B017 - pydantic's ValidationError
        exp.name = "other"  # type: ignore[misc]


def test_toml_round_trip_is_exact():
    exp = validate_spec(copy.deepcopy(SPEC))
    text = spec_to_toml(exp, header="a comment")
    assert text.startswith("# a comment\n")
    again = validate_spec(tomllib.loads(text))
    assert again == exp
    assert 'bw = "384kbit"' in text and 'delay = "25us"' in text and 'rmem = "64KiB"' in text


@pytest.mark.parametrize(("fmt", "value", "text"), [
    (format_rate_exact, 4_000_000, "4Mbit"), (format_rate_exact, 384_000, "384kbit"),
    (format_rate_exact, 1_500, "1500bit"), (format_rate_exact, 10**9, "1Gbit"),
    (format_duration_exact, 0.01, "10ms"), (format_duration_exact, 30.0, "30s"),
    (format_duration_exact, parse_duration("25us"), "25us"), (format_duration_exact, 0.0, "0s"),
    (format_size_exact, 65536, "64KiB"), (format_size_exact, 20_000_000, "20MB"),
    (format_size_exact, 1500, "1500B"),
])
def test_exact_formatting(fmt, value, text):
    assert fmt(value) == text


def test_fattree_defaults_and_names():
    exp = validate_spec({"name": "ft", "duration": "5s", "topology": {"kind": "fattree"},
                         "workload": [{"kind": "flows", "pattern": "random", "count": 4,
                                       "size": "200KB"}]})
    assert isinstance(exp.topology, FatTreeTopology)
    assert exp.controller_kind() == "ecmp"
    assert exp.topology.host_names()[-1] == "S15"
    assert len(exp.topology.switch_names()) == 20
    assert isinstance(exp.workload[0], FlowsWorkload)


def test_custom_topology_kind_is_accepted():
    exp = validate_spec({"name": "c", "duration": "5s",
                         "topology": {"kind": "mypkg.topos:Ring", "params": {"n": 4}},
                         "workload": [{"kind": "ping", "src": "h1", "dst": "h2"}]})
    assert exp.topology.kind == "mypkg.topos:Ring"
    assert exp.topology.params == {"n": 4}


def test_repetition_and_repetitions_conflict():
    data = copy.deepcopy(SPEC)
    data["repetition"] = 2
    with pytest.raises(SpecError, match="repetition"):
        validate_spec(data, "s.toml")


def test_dotted_drops_union_tags():
    data = {"topology": {"kind": "multipath", "paths": [{}, {"bw": "x"}]}}
    assert dotted(("topology", "multipath", "paths", 1, "bw"), data) == "topology.paths[1].bw"
    assert dotted(("workload", 0, "bulk", "size"), {"workload": [{"kind": "bulk"}]}) \
        == "workload[0].size"


def test_describe_reports_every_problem():
    from pydantic import ValidationError

    data = {"name": "x", "duration": "1s", "topology": {"kind": "multipath", "paths": [
        {"name": "a", "bw": "1Mbps"}, {"name": "b", "bw": "2Mbps"}]},
        "workload": [{"kind": "ping", "src": "client", "dst": "server"}]}
    with pytest.raises(ValidationError) as info:
        Experiment.model_validate(data)
    lines = describe_validation_error(info.value, data).splitlines()
    assert lines == ['topology.paths[0].bw: "1Mbps" is not a rate; did you mean "1Mbit"?',
                     'topology.paths[1].bw: "2Mbps" is not a rate; did you mean "2Mbit"?']


@pytest.mark.parametrize(("where", "value"), [
    ("duration", "1e300h"), ("paths.bw", "1e300Tbit"), ("paths.bw", "20Gbit"),
    ("paths.delay", "11s"), ("schedule.bw", "100Gbit"), ("schedule.bw", "10bit"),
    ("schedule.delay", "1h"), ("workload.size", "1e300TiB"),
])
def test_out_of_range_values_are_refused_at_load_time(where, value):
    data = {
        "name": "x", "duration": "10s",
        "topology": {"kind": "multipath", "paths": [{"name": "a", "bw": "10Mbit"}]},
        "workload": [{"kind": "bulk", "src": "client", "dst": "server", "size": "1MB"}],
        "schedule": [{"at": "1s", "link": "a", "bw": "5Mbit"}],
    }
    table, key = where.split(".") if "." in where else ("", where)
    if table == "paths":
        data["topology"]["paths"][0][key] = value
    elif table == "schedule":
        data["schedule"][0] = {"at": "1s", "link": "a", key: value}
    elif table == "workload":
        data["workload"][0][key] = value
    else:
        data[key] = value
    with pytest.raises(SpecError, match=r"too large|out of range"):
        validate_spec(data, "s.toml")


@pytest.mark.parametrize("key", ["net.ipv4/../../kernel/core_pattern", "net..x",
                                 "kernel.core_pattern", "net.ipv4.", "net/../kernel.x",
                                 "net.ipv4.tcp_sack\n"])
def test_sysctl_keys_outside_net_are_refused_at_load_time(key):
    data = {
        "name": "x", "duration": "10s",
        "topology": {"kind": "multipath", "paths": [{"name": "a", "bw": "10Mbit"}]},
        "transport": {"sysctl": {key: "|/tmp/evil"}},
        "workload": [{"kind": "bulk", "src": "client", "dst": "server", "size": "1MB"}],
    }
    with pytest.raises(SpecError, match=r"transport\.sysctl"):
        validate_spec(data, "s.toml")


@pytest.mark.parametrize("value", ["1\necho INJECTED #", "1\r", "1\x00", "\x1b[2J"])
def test_a_sysctl_value_with_a_control_character_is_refused(value):
    data = {
        "name": "x", "duration": "10s",
        "topology": {"kind": "multipath", "paths": [{"name": "a", "bw": "10Mbit"}]},
        "transport": {"sysctl": {"net.ipv4.tcp_sack": value,
                                 "net.ipv4.tcp_rmem": "4096\t131072\t6291456"}},
        "workload": [{"kind": "bulk", "src": "client", "dst": "server", "size": "1MB"}],
    }
    with pytest.raises(SpecError, match=r"transport\.sysctl.*control character"):
        validate_spec(data, "s.toml")
    data["transport"]["sysctl"].pop("net.ipv4.tcp_sack")
    validate_spec(data, "s.toml")  # tabs between fields, as sysctl prints them: fine


@pytest.mark.parametrize("key,value,message", [
    # it replaced transport.cc without its checks (a typo's name, a hand-over's control)
    ("net.ipv4.tcp_congestion_control", "bbrr", "tcp_congestion_control: set transport.cc"),
    # two lines of the model's internals (".str: ... .int: ...")
    ("net.ipv4.tcp_sack", True, "tcp_sack: true must be a string or an integer"),
    ("net.ipv4.tcp_sack", 0.5, "tcp_sack: 0.5 must be a string or an integer"),
])
def test_a_sysctl_the_testbed_sets_or_of_no_sysctl_type_is_one_line(key, value, message):
    data = {
        "name": "x", "duration": "10s",
        "topology": {"kind": "multipath", "paths": [{"name": "a", "bw": "10Mbit"}]},
        "transport": {"sysctl": {key: value}},
        "workload": [{"kind": "bulk", "src": "client", "dst": "server", "size": "1MB"}],
    }
    with pytest.raises(SpecError) as exc:
        validate_spec(data, "s.toml")
    lines = str(exc.value).splitlines()
    assert len(lines) == 1 and f"transport.sysctl: {key}" in lines[0], lines
    assert message in lines[0]


def test_bounds_and_sysctl_problems_are_listed_with_the_others():
    data = {
        "name": "x", "duration": "10s",
        "topology": {"kind": "multipath", "paths": [
            {"name": "a", "bw": "20Gbit"}, {"name": "b", "bw": "10 mbps", "delay": "11s"}]},
        "transport": {"sysctl": {"net.ipv4/../../kernel/core_pattern": "|/tmp/evil"}},
        "workload": [{"kind": "bulk", "src": "client", "dst": "sever", "size": "1MB"}],
        "schedule": [{"at": "1s", "link": "a", "bw": "10bit"}],
    }
    with pytest.raises(SpecError) as info:
        validate_spec(data, "s.toml")
    lines = str(info.value).splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        "topology.paths[0].bw", "topology.paths[1].bw", "topology.paths[1].delay",
        "transport.sysctl", "schedule[0].bw", "workload[0].dst"]
    assert all(line.startswith("s.toml: ") for line in lines)
    assert "out of range; use 1kbit .. 10Gbit" in lines[0]
    assert 'did you mean "10Mbit"?' in lines[1]
    assert "not a per-namespace network sysctl" in lines[3]


@pytest.mark.parametrize(("entry", "words"), [
    ({"link": "wifi", "bw": "1Mbit"}, "schedule[0].at: missing"),
    ({"at": "1s", "link": "wifi"}, "schedule[0]: changes nothing"),
    ({"at": "1s", "link": "wifi", "bw": "1Mbps"}, 'schedule[0].bw: "1Mbps" is not a rate; '
                                                  'did you mean "1Mbit"?'),
    ({"at": "x", "link": "wifi", "bw": "1Mbit"}, "schedule[0].at:"),
    ({"at": "1s", "link": "wifi", "colour": 1}, "schedule[0].colour: unknown key"),
    ({"at": "1s", "link": "wifi", "down": "maybe"}, "schedule[0].down: \"maybe\" is not true "
                                                    "or false"),
    ({"at": "1s", "link": "wifi", "down": True, "bw": "1Mbit"}, "use a second event"),
])
def test_bad_schedule_entries_name_key_and_remedy(entry, words):
    data = copy.deepcopy(SPEC)
    data["schedule"] = [entry]
    with pytest.raises(SpecError) as err:
        validate_spec(data, "s.toml")
    assert words in str(err.value)


def test_schedule_events_are_what_the_network_plays():
    exp = validate_spec(copy.deepcopy(SPEC))
    down, change = exp.schedule
    assert (down.at, down.link_up, down.as_record()) == (12.0, False, {"up": False})
    assert change.as_record() == {"bw_bps": 2_000_000, "delay_s": pytest.approx(25e-6)}
    shape = change.apply_to(exp.topology.paths[1].shape)
    assert (shape.bw_bps, shape.jitter_s) == (2_000_000, 0.005)
    assert shape.delay_s == pytest.approx(25e-6)


def test_bare_numbers_only_in_code():
    data = copy.deepcopy(SPEC)
    data["schedule"] = [{"at": 12, "link": "wifi", "down": True}]
    with pytest.raises(SpecError) as err:
        validate_spec(data, "s.toml")
    assert 'schedule[0].at: 12 is not a duration; did you mean "12s"?' in str(err.value)
    assert Experiment.model_validate(data).schedule[0].at == 12.0


@pytest.mark.parametrize(("value", "words"), [
    (-5, "-5 is not a rate; use a string with a unit, e.g. '4Mbit'"),
    (4000000, 'topology.paths[0].bw: 4000000 is not a rate; did you mean "4Mbit"?'),
    (True, "True is not a rate; use a string with a unit"),
])
def test_bare_numbers_in_a_spec_keep_their_messages(value, words):
    data = copy.deepcopy(SPEC)
    data["topology"]["paths"][0]["bw"] = value
    with pytest.raises(SpecError) as err:
        validate_spec(data, "s.toml")
    assert words in str(err.value)


@pytest.mark.parametrize(("where", "key", "value", "says"), [
    ("top", "seed", "1", '"1" is not an integer'),
    ("top", "seed", 1.0, "1.0 is not an integer"),
    ("top", "seed", True, "true is not an integer"),
    ("top", "repetitions", True, "true is not an integer"),
    ("top", "stop_when_done", "yes", '"yes" is not true or false'),
    ("path", "queue", "100", '"100" is not an integer'),
    ("path", "queue", 99.0, "99.0 is not an integer"),
    ("topology", "server_multihomed", "yes", '"yes" is not true or false'),
    ("transport", "keep_neighbours", "true", '"true" is not true or false'),
])
def test_values_of_another_type_are_refused_not_converted(where, key, value, says):
    """Pydantic's lax mode turned "1", 1.0 and true into the integer 1 and "yes" into
    True: a spec's types are strict (docs/spec.md)."""
    data = {"name": "x", "duration": "10s",
            "topology": {"kind": "multipath", "paths": [{"name": "a", "bw": "10Mbit"}]},
            "workload": [{"kind": "bulk", "src": "client", "dst": "server", "size": "1MB"}]}
    table = {"top": data, "path": data["topology"]["paths"][0],
             "topology": data["topology"]}.get(where)
    if table is None:
        table = data.setdefault(where, {})
    table[key] = value
    with pytest.raises(SpecError) as err:
        validate_spec(data, "s.toml")
    assert str(err.value).endswith(f"{key}: {says}"), str(err.value)


def test_schedule_events_that_change_nothing_in_sequence_are_refused():
    """A link taken down twice lost its second event from the plan without a word; an
    `up` on a link that is up did nothing; two events on one link at one time ran in an
    accidental order."""
    data = {"name": "x", "duration": "10s",
            "topology": {"kind": "multipath", "paths": [{"name": "a", "bw": "10Mbit"}]},
            "workload": [{"kind": "bulk", "src": "client", "dst": "server", "size": "1MB"}],
            "schedule": [{"at": "2s", "link": "a", "down": True},
                         {"at": "3s", "link": "a", "down": True},
                         {"at": "1s", "link": "a", "up": True},
                         {"at": "5s", "link": "a", "bw": "2Mbit"},
                         {"at": "5s", "link": "a", "bw": "4Mbit"}]}
    with pytest.raises(SpecError) as err:
        validate_spec(data, "s.toml")
    assert str(err.value).splitlines() == [
        "s.toml: schedule[2]: link 'a' is already up at 1s (it starts up), so this event "
        "changes nothing; remove it",
        "s.toml: schedule[1]: link 'a' is already down at 3s (the event at 2s took it "
        "down), so this event changes nothing; remove it",
        "s.toml: schedule[4]: changes link 'a' at 5s, as another event does at that time; "
        "give them different times"]
    # up again with a new shape, and a later shape change: fine
    data["schedule"] = [{"at": "2s", "link": "a", "down": True},
                        {"at": "3s", "link": "a", "up": True, "bw": "2Mbit"},
                        {"at": "4s", "link": "a", "bw": "4Mbit"}]
    validate_spec(data, "s.toml")


def test_an_event_both_up_and_down_gets_that_one_line() -> None:
    """`up` and `down` in one event: one line saying so (it also got "already up ...
    changes nothing", as if it had only said up)."""
    data = {"name": "x", "duration": "10s",
            "topology": {"kind": "multipath", "paths": [{"name": "a", "bw": "10Mbit"}]},
            "workload": [{"kind": "bulk", "src": "client", "dst": "server", "size": "1MB"}],
            "schedule": [{"at": "2s", "link": "a", "down": True, "up": True}]}
    with pytest.raises(SpecError) as err:
        validate_spec(data, "s.toml")
    assert str(err.value).splitlines() == [
        "s.toml: schedule[0].up: give up or down, not both (up = true is down = false)"]



def _wl_spec(**workload: object) -> dict:
    return {"name": "x", "duration": "10s",
            "topology": {"kind": "multipath", "paths": [{"name": "a", "bw": "10Mbit"}]},
            "workload": [workload]}


PAIR = {"src": "client", "dst": "server"}


@pytest.mark.parametrize("workload,message", [
    # flows that start after the run ends never ran, without a word
    ({"kind": "flows", "pattern": "random", "count": 3, "size": "1MB", "interval": "5s"},
     r"workload\[0\]\.interval: its flow 3 would start at 10s, not before the end"),
    ({"kind": "bulk", **PAIR, "duration": "20s"},
     r"workload\[0\]\.duration: 20s from its start at 0s runs past the end of the run"),
    ({"kind": "cbr", **PAIR, "rate": "1Mbit", "start": "5s", "duration": "6s"},
     r"workload\[0\]\.duration: 6s from its start at 5s runs past the end"),
    # ping prints no time= below 16 bytes: every echo was recorded as lost
    ({"kind": "ping", **PAIR, "size": 8}, r"workload\[0\]\.size: 8 bytes is too small"),
    # ping -w takes whole seconds: 0.3s became 1s
    ({"kind": "ping", **PAIR, "duration": "0.3s"},
     r"workload\[0\]\.duration: 0\.3s is not whole seconds"),
])
def test_a_workload_that_cannot_do_what_it_says_is_refused(workload, message):
    with pytest.raises(SpecError, match=message):
        validate_spec(_wl_spec(**workload), "s.toml")


def test_the_same_workloads_within_the_run_are_accepted():
    for wl in ({"kind": "flows", "pattern": "random", "count": 2, "size": "1MB",
                "interval": "5s"},
               {"kind": "bulk", **PAIR, "duration": "10s"},
               {"kind": "ping", **PAIR, "size": 16, "duration": "2s"}):
        validate_spec(_wl_spec(**wl), "s.toml")


@pytest.mark.parametrize("table,key", [("capture", "hosts"), ("capture", "interfaces"),
                                       ("sampler", "hosts")])
def test_an_empty_host_or_interface_list_is_refused(table, key):
    """``capture.interfaces = []`` captured nothing and ``capture.hosts = []`` every
    host: an empty list says neither."""
    data = _wl_spec(kind="bulk", **PAIR)
    data[table] = {key: []}
    with pytest.raises(SpecError, match=rf"{table}\.{key}: an empty list; leave the key out"):
        validate_spec(data, "s.toml")


@pytest.mark.parametrize("value", ["1TiB", "3GiB", "1KB"])
def test_a_buffer_cap_the_kernel_cannot_hold_is_refused(value):
    """tcp_rmem/tcp_wmem hold C ints: 1TiB passed validation and failed in the run."""
    data = _wl_spec(kind="bulk", **PAIR)
    data["transport"] = {"rmem": value}
    with pytest.raises(SpecError, match=r"transport\.rmem: .* out of range; use 1KiB \.\. "
                                        "2GiB - 1"):
        validate_spec(data, "s.toml")


def test_a_handover_scheme_on_a_fat_tree_is_refused():
    data = {"name": "x", "duration": "10s", "topology": {"kind": "fattree", "k": 4},
            "controller": {"kind": "ecmp"},
            "transport": {"cc": "reno", "handover": "immediate-expiration"},
            "workload": [{"kind": "bulk", "src": "h0", "dst": "h1"}],
            "schedule": [{"at": "1s", "link": "e0-a0", "down": True}]}
    with pytest.raises(SpecError, match=r"transport\.handover: .* on a fat-tree"):
        validate_spec(data, "s.toml")


def test_every_problem_of_one_workload_is_listed():
    """A workload with a bad src, dst and via gave only the first of the three."""
    data = _wl_spec(kind="bulk", src="sever", dst="clinet", via="wfi", duration="20s")
    with pytest.raises(SpecError) as exc:
        validate_spec(data, "s.toml")
    lines = str(exc.value).splitlines()
    for part in ("workload[0].via: no path named 'wfi'",
                 "workload[0].src: no host named 'sever'",
                 "workload[0].dst: no host named 'clinet'",
                 "workload[0].duration: 20s from its start at 0s runs past the end"):
        assert sum(part in line for line in lines) == 1, (part, lines)
