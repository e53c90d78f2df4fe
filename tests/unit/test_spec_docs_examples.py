"""The examples of the new link keys in docs/spec.md and docs/shaping.md are what a spec
accepts and what the dry run prints (issue 25: everything the docs promise is reachable)."""

from __future__ import annotations

import re
from pathlib import Path

from testbed.run.dryrun import dry_run_commands
from testbed.spec.model import ScheduleEvent
from testbed.spec.sweep import plan_runs

DOCS = Path(__file__).resolve().parents[2] / "docs"
WORKLOAD = '\n[[workload]]\nkind = "ping"\nsrc = "client"\ndst = "server"\n'


def _blocks(name: str, lang: str) -> list[str]:
    text = (DOCS / name).read_text()
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)


def test_the_spec_pages_link_and_trace_examples_load(tmp_path: Path) -> None:
    (bursty,) = [b for b in _blocks("spec.md", "toml") if 'name = "bursty"' in b]
    (schedule,) = [b for b in _blocks("spec.md", "toml") if 'trace = "traces/lte.csv"' in b]
    (csv,) = _blocks("spec.md", "csv")
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "lte.csv").write_text(csv)
    spec = tmp_path / "spec.toml"
    spec.write_text(bursty + "\n" + schedule)
    exp = plan_runs(spec)[0].spec
    wifi, lte = (p.shape for p in exp.topology.paths)
    assert (wifi.jitter_distribution, wifi.jitter_reorder) == ("normal", False)
    assert lte.loss_model is not None
    assert round(lte.loss_model.mean_loss_pct(), 1) == 3.2  # as the page says
    assert exp.schedule == [
        ScheduleEvent(at=5.0, link="wifi", down=True), ScheduleEvent(at=7.0, link="wifi", up=True),
        ScheduleEvent(at=2.0, link="lte", bw=5_000_000),
        ScheduleEvent(at=3.5, link="lte", bw=2_000_000, delay=0.08),
        ScheduleEvent(at=6.0, link="lte", bw=10_000_000)]
    moved = plan_runs(spec, ["schedule.2.at=1s"])[0].spec  # "moves the whole trace"
    assert [e.at for e in moved.schedule if e.link == "lte"] == [1.0, 2.5, 5.0]


def test_the_shaping_pages_tc_commands_are_the_dry_runs(tmp_path: Path) -> None:
    (topology,) = [b for b in _blocks("shaping.md", "toml") if "ge = " in b]
    text = (DOCS / "shaping.md").read_text()
    after = text[text.index(topology) + len(topology) + len("```\n"):]
    commands = re.search(r"```\n(.*?)```", after, flags=re.S)
    assert commands is not None
    spec = tmp_path / "spec.toml"
    spec.write_text('name = "doc"\nduration = "5s"\n' + topology + WORKLOAD)
    shell = dry_run_commands(plan_runs(spec)[0], tmp_path / "run").transcript.as_shell()
    lines = commands.group(1).strip().splitlines()
    assert len(lines) == 2 and all(line in shell for line in lines)


def test_the_spec_pages_profile_examples_load_and_its_table_is_the_profile(
        tmp_path: Path) -> None:
    from testbed.plan.transport import TransportSettings
    from testbed.spec.profile import TCP_2006

    (one,) = [b for b in _blocks("spec.md", "toml") if 'profile = "tcp-2006"' in b]
    (swept,) = [b for b in _blocks("spec.md", "toml") if '"transport.profile"' in b]
    head = ('name = "doc"\nduration = "5s"\n[topology]\nkind = "multipath"\n'
            'paths = [{ name = "a", bw = "10Mbit" }]\n' + WORKLOAD)
    spec = tmp_path / "spec.toml"
    spec.write_text(head + one)
    ts = TransportSettings.from_spec(plan_runs(spec)[0].spec.transport)
    assert ts.cc == "reno" and ts.sysctl["net.ipv4.tcp_sack"] == "1"
    assert ts.sysctl["net.ipv4.tcp_frto"] == "0"
    spec.write_text(head + swept)
    assert [r.spec.transport.profile for r in plan_runs(spec)] == ["linux", "tcp-2006"]
    # the page's table of settings is the profile's
    text = (DOCS / "spec.md").read_text()
    section = text[text.index("### Transport profiles"):text.index("## `[[workload]]`")]
    rows = dict(re.findall(r"^\| (?:route )?`([\w.]+)` \| `([\w-]+)` \|", section, re.M))
    assert rows == {"cc": TCP_2006.cc, **TCP_2006.sysctl_values(),
                    **TCP_2006.route_values()}
