"""A path's distribution, reorder and ge keys, and ``up`` in ``[[schedule]]``: what a spec
accepts, what it refuses (one line per problem), and the tc commands they become."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from testbed.core.compat import tomllib
from testbed.core.errors import SpecError
from testbed.net.shaping import change_commands, netem_params, setup_commands
from testbed.spec.linkshape import GilbertElliott
from testbed.spec.load import spec_to_toml, validate_spec
from testbed.spec.model import ScheduleEvent
from testbed.spec.sweep import canonical_json

SPEC: dict[str, Any] = {
    "name": "keys", "duration": "10s",
    "topology": {"kind": "multipath", "paths": [
        {"name": "wifi", "bw": "10Mbit", "delay": "10ms", "jitter": "2ms",
         "distribution": "normal", "reorder": False},
        {"name": "cell", "bw": "10Mbit", "delay": "30ms",
         "ge": {"p": "1%", "r": "30%", "bad_loss": "90%", "good_loss": "0.5%"}}]},
    "workload": [{"kind": "ping", "src": "client", "dst": "server"}],
    "schedule": [{"at": "1s", "link": "wifi", "down": True},
                 {"at": "2s", "link": "wifi", "up": True},
                 {"at": "3s", "link": "cell", "up": False},
                 {"at": "4s", "link": "cell", "down": False, "bw": "2Mbit"}],
}


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as err:
        validate_spec(data, "s.toml")
    return str(err.value).splitlines()


def test_path_keys_reach_the_link_shape_and_tc() -> None:
    exp = validate_spec(copy.deepcopy(SPEC))
    wifi, cell = (p.shape for p in exp.topology.paths)
    assert (wifi.jitter_distribution, wifi.jitter_reorder) == ("normal", False)
    assert cell.loss_model == GilbertElliott(1.0, 30.0, 90.0, 0.5) and cell.loss_pct == 0
    assert netem_params(wifi)[:6] == ["delay", "10000us", "2000us", "distribution", "normal",
                                      "rate"]
    assert "10000000000bit" in netem_params(wifi)  # netem's own rate: no reordering
    add = setup_commands("s2-eth1", cell)[0]
    assert add[add.index("loss"):add.index("limit")] == [
        "loss", "gemodel", "1%", "30%", "90%", "0.5%"]


def test_defaults_keep_the_old_shape() -> None:
    data = copy.deepcopy(SPEC)
    data["topology"]["paths"] = [{"name": "wifi", "bw": "10Mbit", "delay": "10ms",
                                   "jitter": "2ms"}]
    data["schedule"] = []
    shape = validate_spec(data).topology.paths[0].shape
    assert (shape.jitter_distribution, shape.jitter_reorder, shape.loss_model) == \
        (None, True, None)
    assert netem_params(shape) == ["delay", "10000us", "2000us", "limit", "1020"]


def test_a_schedule_change_keeps_distribution_reorder_and_ge() -> None:
    exp = validate_spec(copy.deepcopy(SPEC))
    wifi, cell = (p.shape for p in exp.topology.paths)
    ev = exp.schedule[3]
    new = ev.apply_to(cell)
    assert new.loss_model == cell.loss_model and new.bw_bps == 2_000_000
    # the netem change states the whole configuration, Gilbert-Elliott loss included
    (netem,) = [c for c in change_commands("s2-eth1", cell, new) if "netem" in c]
    assert netem[netem.index("loss"):netem.index("loss") + 2] == ["loss", "gemodel"]
    slower = ScheduleEvent(at=1.0, link="wifi", jitter=0.004).apply_to(wifi)
    assert (slower.jitter_distribution, slower.jitter_reorder) == ("normal", False)
    assert netem_params(slower)[:5] == ["delay", "10000us", "4000us", "distribution", "normal"]


def test_up_and_down_both_work_and_are_recorded_alike() -> None:
    exp = validate_spec(copy.deepcopy(SPEC))
    states = [(e.link_up, e.as_record().get("up")) for e in exp.schedule]
    assert states == [(False, False), (True, True), (False, False), (True, True)]
    again = validate_spec(tomllib.loads(spec_to_toml(exp)))  # the bundle's spec.toml
    assert again == exp


@pytest.mark.parametrize("change, words", [
    (lambda d: d["topology"]["paths"][0].update(jitter="0ms"),
     ["topology.paths[0].distribution: shapes the jitter, but this path has none; set "
      "jitter", "topology.paths[0].reorder: false keeps jittered packets in order"]),
    (lambda d: d["topology"]["paths"][0].update(distribution="gauss"),
     ["topology.paths[0].distribution: \"gauss\" is not allowed; use 'normal', 'pareto' or "
      "'paretonormal'"]),
    (lambda d: d["topology"]["paths"][0].update(reorder="maybe"),
     ["topology.paths[0].reorder: \"maybe\" is not true or false"]),
    (lambda d: d["topology"]["paths"][1].update(loss="1%"),
     ["topology.paths[1].ge: give either loss (random) or ge (Gilbert-Elliott), not both"]),
    (lambda d: d["topology"]["paths"][1]["ge"].pop("r"),
     ["topology.paths[1].ge.r: missing"]),
    (lambda d: d["topology"]["paths"][1]["ge"].update(bad_los="1%"),
     ["topology.paths[1].ge.bad_los: unknown key; did you mean 'bad_loss'?"]),
    (lambda d: d["topology"]["paths"][1]["ge"].update(p="120%"),
     ["topology.paths[1].ge.p: '120%' is more than 100%"]),
    (lambda d: d["schedule"][1].update(down=False),
     ["schedule[1].up: give up or down, not both"]),
    (lambda d: d["schedule"][2].update(bw="1Mbit"),
     ["schedule[2].up: a link taken down cannot change bw/delay/jitter/loss"]),
    (lambda d: d["schedule"][3].update(loss="1%"),
     ["schedule[3].loss: path 'cell' has Gilbert-Elliott loss (ge), which a schedule "
      "cannot change"]),
])
def test_wrong_keys_give_one_line_each(change: Any, words: list[str]) -> None:
    data = copy.deepcopy(SPEC)
    change(data)
    problems = _problems(data)
    assert len(problems) == len(words), problems
    for line, expected in zip(problems, words, strict=True):
        assert line.startswith("s.toml: ") and expected in line


def test_several_wrong_keys_are_reported_at_once() -> None:
    data = copy.deepcopy(SPEC)
    data["topology"]["paths"][0]["jitter"] = "0ms"          # distribution + reorder: 2
    data["topology"]["paths"][1]["loss"] = "2%"             # ge with loss: 1
    data["schedule"][1]["down"] = False                     # up and down: 1
    data["workload"][0]["dst"] = "sever"                    # not one of these keys: 1
    problems = _problems(data)
    assert len(problems) == 5, problems
    assert sum("topology.paths[0]." in p for p in problems) == 2
    assert any("schedule[1].up:" in p for p in problems)
    assert any("workload[0].dst: no host named 'sever'" in p for p in problems)


def test_a_spec_without_the_new_keys_keeps_its_run_id() -> None:
    data = copy.deepcopy(SPEC)
    data["topology"]["paths"] = [{"name": "wifi", "bw": "10Mbit", "delay": "10ms"}]
    data["schedule"] = [{"at": "1s", "link": "wifi", "down": True}]
    text = canonical_json(validate_spec(data), 1)
    assert "reorder" not in text and "distribution" not in text and '"up"' not in text
