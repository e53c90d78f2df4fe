"""testbed.net.cleanup: the manifest and the process lookups the clean-up relies on."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from testbed.core.errors import InputError
from testbed.net import cleanup as cl
from testbed.net import netns
from testbed.run.recovery import recover_dead_networks


def test_manifest_round_trip(tmp_path: Path) -> None:
    m = cl.Manifest(hosts={"h1": 10}, netns={"h1": 4026532000}, switches={"s1": 11},
                    interfaces=["h1-eth0", "s1-eth1"], bridges=["s1"],
                    nft_tables=[["netdev", "spray_s1"]])
    m.write(tmp_path / "network.json")
    assert cl.Manifest.read(tmp_path / "network.json") == m


def test_netns_lookup_finds_this_process_namespace() -> None:
    mine = cl.netns_inode(os.getpid())
    assert mine is not None
    assert cl.netns_inode(2**22 + 12345) is None
    # our own pid is never reported (we must not kill ourselves)
    assert os.getpid() not in cl.pids_in_netns({mine})


def test_parse_link_names_on_captured_output() -> None:
    text = (Path(__file__).parents[1] / "data" / "network" / "ip-o-link.txt").read_text()
    assert cl.parse_link_names(text) == ["lo", "ifb0", "eth0", "ovs-system", "s1", "s1-eth1",
                                         "s1-eth2"]


def test_is_mininet_shell_checks_the_cmdline() -> None:
    assert not cl.is_mininet_shell(os.getpid(), "h1")


# -- trusted manifests (issue 19) --------------------------------------------------------

TAG = "0123456789abcdef"
LABEL = f"testbed-net={TAG}"


class RecordingRunner:
    """Answers `ip -j link show`, `ovs-vsctl ... list Bridge` and `nft list table` as if
    everything existed, each carrying its label (name -> label; "" for none); records
    every command, so a test sees what a clean-up would delete."""

    def __init__(self, links=None, bridges=None, tables=None):
        self.cmds: list[list[str]] = []
        self.links = links if links is not None else {"s1-eth1": LABEL, "eth0": ""}
        self.bridges = bridges if bridges is not None else {"s1": LABEL, "br-ex": ""}
        self.tables = tables if tables is not None else {}

    def run(self, argv, **_kw):
        from testbed.core.commands import Result

        self.cmds.append(list(argv))
        out, rc = "", 0
        if argv[:3] == ["ip", "-j", "link"]:
            out = json.dumps([{"ifname": n, **({"ifalias": a} if a else {})}
                              for n, a in self.links.items()])
        elif argv[-2:] == ["list", "Bridge"]:
            out = json.dumps({"headings": ["name", "external_ids"], "data": [
                [n, ["map", [["testbed-net", a.split("=", 1)[1]]] if a else []]]
                for n, a in self.bridges.items()]})
        elif argv[:3] == ["nft", "list", "table"]:
            key = (argv[3], argv[4])
            if key not in self.tables:
                return Result(list(argv), 1, "", "No such file or directory", 0.0)
            comment = f'\tcomment "{self.tables[key]}"\n' if self.tables[key] else ""
            out = f"table {key[0]} {key[1]} {{\n{comment}\tchain c {{\n\t}}\n}}\n"
        return Result(list(argv), rc, out, "", 0.0)

    def ok(self, argv, **_kw):
        self.cmds.append(list(argv))
        return True

    def deletions(self):
        return [c for c in self.cmds if "del" in c or "del-br" in c or "delete" in c]


def test_a_planted_manifest_without_a_trusted_copy_removes_nothing(tmp_path):
    planted = tmp_path / "bundle" / "logs" / "network" / "network.json"
    planted.parent.mkdir(parents=True)
    planted.write_text(json.dumps({"interfaces": ["eth0"], "bridges": ["br-ex"],
                                   "nft_tables": [["inet", "firewall"]]}))
    runner = RecordingRunner()
    report = cl.cleanup_from_manifest(planted, runner)
    assert runner.deletions() == []
    assert "no copy in the testbed's state directory" in report["untrusted"][0]


def test_only_the_trusted_copy_is_acted_on(tmp_path):
    path = tmp_path / "network.json"
    cl.Manifest(interfaces=["s1-eth1"], bridges=["s1"], tag=TAG).write(path)
    path.write_text(json.dumps({"interfaces": ["eth0"], "bridges": ["br-ex"]}))  # tampered
    runner = RecordingRunner()
    report = cl.cleanup_from_manifest(path, runner)
    assert runner.deletions() == [["ip", "link", "del", "dev", "s1-eth1"],
                                  ["ovs-vsctl", "--timeout=10", "--if-exists", "del-br", "s1"]]
    assert "differs" in report["untrusted"][0]
    assert not cl.state_copy(path).exists()  # used once, then forgotten
    assert cl.cleanup_from_manifest(path, RecordingRunner())["untrusted"]


def test_only_what_carries_the_manifests_tag_is_removed(tmp_path):
    """A recorded name that now holds an interface, bridge or table without this
    network's tag (another network's, another tool's, or none) is left alone and named."""
    path = tmp_path / "network.json"
    cl.Manifest(interfaces=["s1-eth1", "s2-eth1", "eth0"], bridges=["s1", "s2", "br-ex"],
                nft_tables=[["netdev", "spray_s1"], ["netdev", "spray_s2"],
                            ["inet", "fw"]], tag=TAG).write(path)
    other = "testbed-net=fedcba9876543210"
    runner = RecordingRunner(links={"s1-eth1": LABEL, "s2-eth1": other, "eth0": ""},
                             bridges={"s1": LABEL, "s2": other, "br-ex": ""},
                             tables={("netdev", "spray_s1"): LABEL,
                                     ("netdev", "spray_s2"): other, ("inet", "fw"): ""})
    report = cl.cleanup_from_manifest(path, runner)
    assert runner.deletions() == [
        ["ip", "link", "del", "dev", "s1-eth1"],
        ["ovs-vsctl", "--timeout=10", "--if-exists", "del-br", "s1"],
        ["nft", "delete", "table", "netdev", "spray_s1"]]
    assert sorted(report["untagged"]) == ["bridge br-ex", "bridge s2", "interface eth0",
                                          "interface s2-eth1", "nft table inet fw",
                                          "nft table netdev spray_s2"]


def test_a_manifest_without_a_tag_removes_no_interface_bridge_or_table(tmp_path):
    path = tmp_path / "network.json"
    cl.Manifest(interfaces=["s1-eth1"], bridges=["s1"], nft_tables=[["netdev", "spray_s1"]],
                tag="").write(path)
    assert "tag" in json.loads(path.read_text())
    runner = RecordingRunner(tables={("netdev", "spray_s1"): LABEL})
    cl.cleanup_from_manifest(path, runner)
    assert runner.deletions() == []


def test_tag_parsers_on_the_tools_output():
    from testbed.net import tags

    assert tags.link_aliases('[{"ifname":"s1-eth1","ifalias":"testbed-net=ab12cd34"},'
                             '{"ifname":"lo"}]') == {"s1-eth1": "testbed-net=ab12cd34",
                                                     "lo": ""}
    assert tags.link_aliases("not json") == {}
    vsctl = ('{"data":[["s1",["map",[["testbed-net","ab12cd34"]]]],["br0",["map",[]]]],'
             '"headings":["name","external_ids"]}')
    assert tags.bridge_labels(vsctl) == {"s1": "testbed-net=ab12cd34", "br0": ""}
    ruleset = ('table netdev spray_s1 {\n\tcomment "testbed-net=ab12cd34"\n\tchain c {\n'
               '\t}\n}\ntable inet fw {\n\tchain input {\n\t}\n}\n')
    assert tags.nft_comments(ruleset) == {("netdev", "spray_s1"): "testbed-net=ab12cd34",
                                          ("inet", "fw"): ""}
    assert tags.alias_batch(["s1-eth1"], "ab12cd34") == \
        "link set dev s1-eth1 alias testbed-net=ab12cd34\n"
    assert tags.TAG_RE.fullmatch(tags.new_tag())


def test_manifest_write_is_atomic_and_keeps_one_trusted_copy(tmp_path, _private_state_dir):
    m = cl.Manifest(bridges=["s1"])
    m.write(tmp_path / "a" / "network.json")
    m.write(tmp_path / "b" / "network.json")
    copies = list((_private_state_dir / "networks").iterdir())
    assert copies == [cl.state_copy(tmp_path / "b" / "network.json")]
    assert not list(tmp_path.rglob("*.tmp"))
    m.discard()
    assert not list((_private_state_dir / "networks").iterdir())


@pytest.mark.parametrize("bad", [[], {"hosts": {"h1": "1; rm"}}, {"bridges": "s1"},
                                 {"nft_tables": [["inet"]]}, {"evil": 1},
                                 {"processes": {"c": [1]}}, {"tag": "../x"}, {"tag": 7}])
def test_malformed_manifests_are_refused(tmp_path, bad):
    p = tmp_path / "m.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(InputError, match="not a network manifest"):
        cl.Manifest.read(p)


def test_state_dir_must_be_private(tmp_path, monkeypatch):
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o777)
    open_dir.chmod(0o777)
    monkeypatch.setenv(cl.STATE_DIR_ENV, str(open_dir))
    with pytest.raises(InputError, match="state directory"):
        cl.state_dir()
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    monkeypatch.setenv(cl.STATE_DIR_ENV, str(link))
    with pytest.raises(InputError, match="state directory"):
        cl.state_dir()
    monkeypatch.setenv(cl.STATE_DIR_ENV, str(tmp_path / "new"))
    assert stat.S_IMODE(os.stat(cl.state_dir()).st_mode) == 0o700


def test_the_recorded_controller_is_ended_after_a_sigkill_of_the_run(tmp_path):
    proc = subprocess.Popen(["sleep", "60"])
    try:
        m = cl.Manifest()
        m.record_process("controller", proc.pid)
        path = tmp_path / "network.json"
        m.write(path)
        report = cl.cleanup_from_manifest(path, RecordingRunner())
        assert proc.wait(timeout=5) is not None
        assert report["processes"] == [f"{proc.pid} (controller)"]
    finally:
        proc.kill()
        proc.wait()


def test_a_reused_controller_pid_is_not_signalled(tmp_path):
    proc = subprocess.Popen(["sleep", "60"])
    try:
        m = cl.Manifest(processes={"controller": [proc.pid, 1]})  # another start time
        path = tmp_path / "network.json"
        m.write(path)
        cl.cleanup_from_manifest(path, RecordingRunner())
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_network_records_its_controller_in_the_trusted_manifest(tmp_path):
    from types import SimpleNamespace

    from testbed.net.record import NetworkRecord

    record = NetworkRecord(tmp_path)  # a network's manifest bookkeeping
    record.note_controller(SimpleNamespace(proc=SimpleNamespace(pid=os.getpid())))
    trusted = cl.Manifest.read(cl.state_copy(tmp_path / cl.MANIFEST))
    assert trusted.processes["controller"] == [os.getpid(),
                                               cl.process_start_time(os.getpid())]


def test_a_study_passes_recovery_on(monkeypatch, tmp_path):
    import inspect

    from testbed.run import study

    assert "recover=recover_bundle" in inspect.getsource(study)


TCP_HEADER = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt"
              "   uid  timeout inode")


def _tcp_row(st: str) -> str:
    return (f"   0: 0101000A:C350 0164000A:1389 {st} 00000000:00000000 00:00000000 00000000"
            "     0        0 12345 1 0000000000000000 20 4 30 10 -1")


def test_live_sockets_skips_time_wait_and_a_gone_process(tmp_path: Path) -> None:
    net = tmp_path / "42" / "net"
    net.mkdir(parents=True)
    # an orphan retrying (FIN_WAIT1), a listener, a TIME_WAIT entry (holds nothing)
    (net / "tcp").write_text("\n".join([TCP_HEADER, _tcp_row("04"), _tcp_row("0A"),
                                        _tcp_row("06")]) + "\n")
    (net / "tcp6").write_text(TCP_HEADER + "\n" + _tcp_row("01") + "\n")
    assert netns.live_sockets(42, proc=tmp_path) == 3
    (net / "tcp").write_text(TCP_HEADER + "\n" + _tcp_row("06") + "\n")
    (net / "tcp6").write_text(TCP_HEADER + "\n")
    assert netns.live_sockets(42, proc=tmp_path) == 0
    assert netns.live_sockets(43, proc=tmp_path) == 0


def test_destroy_sockets_runs_ss_only_where_sockets_are_left(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Runner:
        def __init__(self) -> None:
            self.calls: list[tuple[list[str], str]] = []

        def run(self, argv: list[str], host: netns.ShellRef, check: bool, timeout: float
                ) -> subprocess.CompletedProcess[str]:
            self.calls.append((argv, host.name))
            return subprocess.CompletedProcess(argv, 0, "ESTAB 0 0 10.0.1.1:50000 x\n"
                                               "FIN-WAIT-1 0 9 10.0.2.1:50001 y\n", "")

    monkeypatch.setattr(netns, "live_sockets", lambda pid: {10: 2, 11: 0}.get(pid, 0))
    runner = Runner()
    out = netns.destroy_sockets(runner, [netns.ShellRef("client", 10),  # type: ignore[arg-type]
                                      netns.ShellRef("server", 11)])
    assert runner.calls == [(netns.DESTROY_SOCKETS, "client")]
    assert out == ["client: 2"]


def test_manifest_netns_handles_must_carry_its_own_tag(tmp_path: Path) -> None:
    m = cl.Manifest(hosts={"client": 10}, netns={"client": 4026532000}, tag="0123456789abcdef",
                    netns_handles=[netns.netns_handle("0123456789abcdef", "client")])
    m.write(tmp_path / "network.json")
    assert cl.Manifest.read(tmp_path / "network.json").netns_handles == [
        "tb-0123456789abcdef-client"]
    data = json.loads(m.to_json())
    for bad in (["tb-fedcba9876543210-client"],     # another network's handle
                ["../../etc/client"], ["tb-0123456789abcdef-a/b"], [7]):
        with pytest.raises(TypeError):
            cl.Manifest.from_data({**data, "netns_handles": bad})
    with pytest.raises(TypeError):                  # no tag: no handle can be ours
        cl.Manifest.from_data({**data, "tag": "", "netns_handles": m.netns_handles})


def test_handles_of_hosts_with_a_dash_are_read_back(tmp_path: Path) -> None:
    tag = "0123456789abcdef"
    m = cl.Manifest(hosts={"h-1": 10}, tag=tag, netns_handles=[netns.netns_handle(tag, "h-1")],
                    owner=[10, 20])
    m.write(tmp_path / "network.json")
    back = cl.Manifest.read(tmp_path / "network.json")
    assert back.netns_handles == ["tb-0123456789abcdef-h-1"] and back.owner == [10, 20]
    for bad in ([1], [1, 2, 3], ["1", 2], [True, 2]):
        with pytest.raises(TypeError):
            cl.Manifest.from_data({**json.loads(m.to_json()), "owner": bad})
    with pytest.raises(TypeError):  # a newline would be a second `ip -batch` line
        cl.Manifest.from_data({**json.loads(m.to_json()),
                               "netns_handles": [f"tb-{tag}-a\nnetns delete x"]})


def test_dead_networks_are_cleaned_up_and_live_ones_left(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cl.STATE_DIR_ENV, str(tmp_path / "state"))
    me = netns.this_process()
    assert me and me[0] == os.getpid()
    dead = cl.Manifest(tag="aaaaaaaaaaaaaaaa", interfaces=["x-eth0"], owner=[me[0], me[1] + 1])
    live = cl.Manifest(tag="bbbbbbbbbbbbbbbb", interfaces=["y-eth0"], owner=me)
    old = cl.Manifest(tag="cccccccccccccccc", interfaces=["z-eth0"])  # no owner recorded
    for name, m in (("dead", dead), ("live", live), ("old", old)):
        m.write(tmp_path / name / "network.json")
    removed: list[str] = []

    def remove(manifest: cl.Manifest, runner: object) -> dict[str, list[str]]:
        removed.append(manifest.tag)
        return {"interfaces": list(manifest.interfaces)}
    monkeypatch.setattr(cl, "remove_dead", remove)
    out = recover_dead_networks(runner=object())  # type: ignore[arg-type]
    assert removed == ["aaaaaaaaaaaaaaaa"]
    assert out == {"aaaaaaaaaaaaaaaa": {"interfaces": ["x-eth0"]}}
    assert not cl.state_copy(tmp_path / "dead" / "network.json").exists()
    assert cl.state_copy(tmp_path / "live" / "network.json").exists()
    assert cl.state_copy(tmp_path / "old" / "network.json").exists()


def test_remove_leftovers_ends_processes_then_sockets_then_shells_then_handles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tag = "0123456789abcdef"
    m = cl.Manifest(hosts={"client": 10, "server": 11}, netns={"client": 100, "server": 101},
                    tag=tag, netns_handles=[netns.netns_handle(tag, "client")])
    order: list[str] = []
    monkeypatch.setattr(cl, "is_mininet_shell", lambda pid, name: pid == 10)  # server's gone
    monkeypatch.setattr(cl, "netns_inode", lambda pid: {10: 100, 11: 101}.get(pid))
    monkeypatch.setattr(cl, "pids_in_netns",
                        lambda inodes, exclude=(): [p for p in (50, 10) if p not in exclude])
    monkeypatch.setattr(cl, "kill_pids", lambda pids, grace=2.0: order.append(
        f"kill {sorted(pids)}") or list(pids))
    monkeypatch.setattr(cl, "destroy_sockets", lambda runner, shells: order.append(
        f"ss via {[s.name for s in shells]}") or [])
    monkeypatch.setattr(cl, "destroy_sockets_in", lambda runner, handles: order.append(
        f"ss in {list(handles)}") or ["tb-0123456789abcdef-client: 1"])
    monkeypatch.setattr(cl.os.path, "lexists", lambda p: False)

    class Runner:
        def run(self, argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
            if argv[:2] == ["ip", "-force"]:
                order.append(f"ip {kw.get('input')!r}")
            return subprocess.CompletedProcess(argv, 0, "[]", "")

    report = cl.remove_leftovers(m, Runner(), fresh=False)  # type: ignore[arg-type]
    assert order == ["kill [50]", "ss via ['client']", "kill [10]", "ss in []",
                     "ip 'netns delete tb-0123456789abcdef-client\\n'"]
    assert report["sockets"] == ["tb-0123456789abcdef-client: 1"]
    assert report["processes"] == ["50", "10"]


def test_a_handle_that_stays_is_an_error_so_the_manifest_is_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tag = "0123456789abcdef"
    m = cl.Manifest(tag=tag, netns_handles=[netns.netns_handle(tag, "client")])
    monkeypatch.setattr(cl.os.path, "lexists", lambda p: str(p).endswith("-client"))
    monkeypatch.setattr(cl, "destroy_sockets_in", lambda runner, handles: [])

    class Runner:
        def run(self, argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
            return subprocess.CompletedProcess(argv, 0, "[]", "")

    with pytest.raises(cl.TestbedError, match="tb-0123456789abcdef-client"):
        cl.remove_leftovers(m, Runner(), fresh=True)  # type: ignore[arg-type]


def test_a_handle_names_its_namespace_only_when_the_manifest_lists_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tag = "0123456789abcdef"
    monkeypatch.setattr(cl, "NETNS_DIR", tmp_path)
    (tmp_path / netns.netns_handle(tag, "client")).write_text("")
    (tmp_path / netns.netns_handle(tag, "server")).write_text("")
    m = cl.Manifest(tag=tag, netns_handles=[netns.netns_handle(tag, "client")])
    assert cl.handle_inode(m, "client") == (tmp_path / f"tb-{tag}-client").stat().st_ino
    assert cl.handle_inode(m, "server") is None     # a handle it did not make
    assert cl.handle_inode(m, "router") is None
