"""``testbed run --dry-run`` (`testbed.run.dryrun`): the commands, recorded without root."""

from __future__ import annotations

import copy

from test_plan import FAT, MULTI, plan

from testbed.core.recording import RecordingRunner
from testbed.run.dryrun import dry_run_commands


def test_dry_run_records_the_commands_without_running_them(tmp_path):
    p = plan(MULTI)
    runner = dry_run_commands(p, tmp_path / p.run_id)
    assert isinstance(runner, RecordingRunner)
    kinds = {e.kind for e in runner.transcript.entries}
    assert kinds == {"run", "spawn", "stop", "batch"}  # as a real run records them
    assert not (tmp_path / p.run_id).exists()  # nothing ran: no bundle, no capture file
    text = runner.transcript.as_shell()
    assert "tc qdisc add dev s2-eth1 root handle 1: netem" in text
    assert "# in client: mnexec -a 0 sysctl -q -w net.ipv4.tcp_congestion_control=reno" \
        in text
    assert "ip mptcp endpoint add 10.0.2.1 dev client-eth1 signal" in text  # a download
    assert f"-w {tmp_path / p.run_id}/pcap/client-client-eth1.pcap" in text
    assert "raise SystemExit(main())' server --port 5001 --protocol tcp" in text
    assert "ping -D -O -n -i 0.1 -s 56 -W 1 -c 20 -I 10.0.2.1 10.0.100.1" in text
    # sent to the root namespace's ip batch shell at 5 s, shown as the command it is
    assert "# at t = 5s on the run's clock (after its start):\nip link set dev s1-eth1 down\n" \
        in text


def test_dry_run_shows_scheduled_commands_with_their_times(tmp_path):
    p = plan(MULTI)
    text = dry_run_commands(p, tmp_path / p.run_id).transcript.as_shell()
    at3 = text.index("# at t = 3s on the run's clock")
    at5 = text.index("# at t = 5s on the run's clock")
    assert at3 < at5  # in time order, not spec order
    block = text[at3:at5]
    assert "tc qdisc change dev s2-eth1 parent 1:1 handle 2: tbf rate 1000000bit" in block
    assert block.count("\ntc qdisc change") == 4  # both directions: netem and tbf each
    scheduled = [e for e in dry_run_commands(p, tmp_path).transcript.entries
                 if e.at is not None]
    assert [e.at for e in scheduled] == [3.0] * 4 + [5.0] * 2
    assert {e.where for e in scheduled} == {"root"}  # the switch ports of the two paths


def test_dry_run_fattree(tmp_path):
    p = plan(FAT)
    text = dry_run_commands(p, tmp_path).transcript.as_shell()
    assert text.count("tcpdump -i") == 16
    assert "raise SystemExit(main())' client" in text
    assert "-m controllers ecmp --port 6653" in text and "nft -f -" not in text
    spray = copy.deepcopy(FAT)
    spray["controller"] = {"kind": "spray"}
    text = dry_run_commands(plan(spray), tmp_path).transcript.as_shell()
    assert "-m controllers spray --port 6653" in text
    assert "nft -f - <<'EOF'\ntable netdev mptb_spray_" in text  # the input, replayable
    assert "meta mark set numgen random mod 2" in text


def test_dry_run_never_imports_or_builds_a_custom_topology(tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    (tmp_path / "evil_topo.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "from mininet.topo import Topo\n"
        "class T(Topo):\n"
        "    def build(self, **_):\n"
        f"        open({str(marker)!r}, 'a').write('built')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data = {"name": "c", "duration": "5s", "topology": {"kind": "evil_topo:T"},
            "workload": [{"kind": "ping", "src": "h1", "dst": "h2"}]}
    runner = dry_run_commands(plan(data), tmp_path / "run")
    assert runner.transcript.entries == [] and not marker.exists()


def test_dry_run_of_an_mptcp_fattree_sees_each_hosts_address(tmp_path):
    """A fat-tree host's address is its node's, not its link's (Mininet puts it on the
    default interface): the dry run of an MPTCP fat-tree failed with "MPTCP needs at least
    one interface with an address" where the real run worked."""
    mp = copy.deepcopy(FAT)
    mp["transport"] = {"protocol": "mptcp"}
    text = dry_run_commands(plan(mp), tmp_path).transcript.as_shell()
    for host in ("S0", "S15"):
        assert f"# in {host}: mnexec -a 0 sysctl -q -w net.mptcp.enabled=1" in text
        assert f"# in {host}: mnexec -a 0 ip mptcp endpoint flush" in text
