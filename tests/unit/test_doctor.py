import json
import subprocess
import sys

from testbed.core.commands import CommandRunner
from testbed.machine.doctor import (
    Check,
    Probe,
    check_congestion_controls,
    check_mptcp,
    native_ok,
    report_json,
    report_text,
)


def fake_proc(tmp_path, files):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")
    return Probe(CommandRunner(), root=tmp_path)


def test_mptcp_checks_from_proc(tmp_path):
    p = fake_proc(tmp_path, {"proc/sys/net/mptcp/enabled": "1"})
    mptcp, sched = check_mptcp(p)
    assert mptcp.ok and not sched.ok and not sched.required
    assert "kernel < 6.6" in sched.detail
    p = fake_proc(tmp_path, {"proc/sys/net/mptcp/enabled": "0",
                             "proc/sys/net/mptcp/scheduler": "default"})
    mptcp, sched = check_mptcp(p)
    assert not mptcp.ok and "sysctl -w net.mptcp.enabled=1" in mptcp.remedy and sched.ok


def test_missing_mptcp_names_vm(tmp_path):
    mptcp, _ = check_mptcp(Probe(CommandRunner(), root=tmp_path))
    assert not mptcp.ok and "testbed vm" in mptcp.remedy


def test_congestion_controls_listed(tmp_path):
    p = fake_proc(tmp_path, {"proc/sys/net/ipv4/tcp_available_congestion_control": "reno cubic"})
    c = check_congestion_controls(p)
    assert c.ok and "reno cubic" in c.detail


def test_coupled_cc_check(tmp_path, monkeypatch):
    from testbed.machine.doctor import check_coupled_cc

    monkeypatch.setenv("PATH", "/usr/bin:/usr/sbin")
    files = {"proc/sys/kernel/osrelease": "6.1.0-56-amd64", "sys/kernel/btf/vmlinux": "",
             "usr/bin/clang": "", "usr/sbin/bpftool": "", "usr/include/bpf/bpf_helpers.h": ""}
    p = fake_proc(tmp_path, files)
    c = check_coupled_cc(p)
    assert c.ok and not c.required and "lia olia balia wvegas" in c.detail
    (tmp_path / "sys/kernel/btf/vmlinux").unlink()
    (tmp_path / "usr/sbin/bpftool").unlink()
    (tmp_path / "proc/sys/kernel/osrelease").write_text("5.10.0-28-amd64")
    c = check_coupled_cc(p)
    assert not c.ok and "older than 5.19" in c.detail and "no kernel BTF" in c.detail
    assert "bpftool" in c.detail and "scripts/install" in c.remedy


def test_native_ok_and_reports():
    checks = [Check("a", True, "fine"), Check("b", False, "gone", "install b"),
              Check("c", False, "optional", required=False)]
    assert not native_ok(checks)
    assert native_ok([checks[0], checks[2]])
    data = json.loads(report_json(checks))
    assert data["native_ok"] is False
    assert {c["name"] for c in data["checks"]} == {"a", "b", "c"}
    text = report_text(checks)
    assert "NO  b: gone  -> install b" in text
    assert "testbed vm" in text.splitlines()[-1]


def test_doctor_cli_never_crashes_and_agrees_with_exit_code():
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "doctor", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert "Traceback" not in res.stderr
    data = json.loads(res.stdout)
    assert res.returncode == (0 if data["native_ok"] else 1)
    names = {c["name"] for c in data["checks"]}
    for required in ("sch_netem", "openvswitch module", "MPTCP", "nftables", "tshark",
                     "Mininet", "os-ken", "KVM with stock kernel", "congestion controls"):
        assert required in names or (required == "KVM with stock kernel"
                                     and "testbed vm" in names)
