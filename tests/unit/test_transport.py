"""Unit tests for testbed.host.transport (no root: a scripted runner stands in for the kernel)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from testbed.core.commands import Result
from testbed.core.errors import CommandError, InputError, UnsupportedError
from testbed.host.transport import (
    apply_tcp,
    buffer_sysctls,
    check_cc_name,
    ensure_cc,
    modprobe_cc_argv,
    parse_cc_list,
    sysctl_write_argv,
)
from testbed.spec.sysctl import check_sysctls


@dataclass
class Host:
    name: str = "h1"
    pid: int = 4242


@dataclass
class ScriptedKernel:
    """A runner that emulates sysctl/modprobe: per-namespace sysctls, loadable CCs."""

    available: list[str] = field(default_factory=lambda: ["reno", "cubic"])
    modules: set[str] = field(default_factory=lambda: {"tcp_bbr", "tcp_vegas"})
    values: dict[tuple[str, str], str] = field(
        default_factory=lambda: {("root", "net.ipv4.tcp_allowed_congestion_control"):
                                 "reno cubic"})
    calls: list[tuple[str, list[str]]] = field(default_factory=list)

    def run(self, argv, host=None, check=True, record=True, timeout=None, **_kw) -> Result:
        where = host.name if host is not None else "root"
        argv = list(argv)
        self.calls.append((where, argv))
        rc, out = 0, ""
        if argv[:2] == ["sysctl", "-n"]:
            for key in argv[2:]:  # one line per key, in order
                if key == "net.ipv4.tcp_available_congestion_control":
                    out += " ".join(self.available) + "\n"
                else:
                    out += self.values.get((where, key), "1") + "\n"
        elif argv[:3] == ["sysctl", "-q", "-w"]:
            for assign in argv[3:]:  # like procps: every one tried, non-zero if any failed
                key, _, value = assign.partition("=")
                allowed = self.values[("root", "net.ipv4.tcp_allowed_congestion_control")]
                if key.startswith("net.core."):
                    rc = 255
                elif (key == "net.ipv4.tcp_congestion_control" and where != "root"
                      and value not in allowed.split()):
                    rc = 255  # EPERM: only allowed CCs can be a namespace's default
                else:
                    self.values[(where, key)] = value
        elif argv[0] == "modprobe":
            mod = argv[-1]
            if mod in self.modules:
                self.available.append(mod.removeprefix("tcp_"))
            else:
                rc = 1
        if check and rc:
            raise CommandError(argv, rc, "sysctl: permission denied", where)
        return Result(argv, rc, out, "", 0.0)

    def ok(self, argv, **kw) -> bool:
        return self.run(argv, check=False, **kw).returncode == 0


def test_argv_builders() -> None:
    assert sysctl_write_argv("net.ipv4.tcp_rmem", (4096, 65536, 65536)) == \
        ["sysctl", "-q", "-w", "net.ipv4.tcp_rmem=4096 65536 65536"]
    assert modprobe_cc_argv("bbr") == ["modprobe", "-q", "tcp_bbr"]
    assert parse_cc_list("reno cubic bbr\n") == ["reno", "cubic", "bbr"]


def test_buffer_caps() -> None:
    assert buffer_sysctls(65536, None) == {"net.ipv4.tcp_rmem": "4096 65536 65536"}
    assert buffer_sysctls(None, 8192) == {"net.ipv4.tcp_wmem": "4096 8192 8192"}
    assert buffer_sysctls(2048, None) == {"net.ipv4.tcp_rmem": "2048 2048 2048"}
    assert buffer_sysctls(None, None) == {}
    with pytest.raises(InputError, match=r"transport\.rmem"):
        buffer_sysctls(100, None)


def test_user_sysctls_are_checked() -> None:
    assert check_sysctls({"net.ipv4.tcp_no_metrics_save": 1}) == \
        {"net.ipv4.tcp_no_metrics_save": "1"}
    with pytest.raises(InputError, match=r"kernel\.pid_max"):
        check_sysctls({"kernel.pid_max": 5})
    with pytest.raises(InputError, match="must be a string or an integer"):
        check_sysctls({"net.ipv4.x": [1]})


def test_cc_name_shape() -> None:
    check_cc_name("bbr")
    with pytest.raises(UnsupportedError, match="not a congestion-control name"):
        check_cc_name("tcp bbr; rm")


def test_ensure_cc_loads_a_module_when_needed() -> None:
    k = ScriptedKernel()
    assert ensure_cc(k, "cubic") == ["reno", "cubic"]
    assert not any(a[0] == "modprobe" for _w, a in k.calls)
    assert "bbr" in ensure_cc(k, "bbr")
    assert ("root", ["modprobe", "-q", "tcp_bbr"]) in k.calls
    assert k.values[("root", "net.ipv4.tcp_allowed_congestion_control")] == "reno cubic bbr"


def test_apply_tcp_with_a_loaded_cc_in_a_namespace() -> None:
    k = ScriptedKernel()
    applied = apply_tcp(k, Host(), cc="vegas")
    assert applied["net.ipv4.tcp_congestion_control"] == "vegas"
    assert applied["net.ipv4.tcp_allowed_congestion_control"] == "reno cubic vegas"


def test_ensure_cc_refuses_with_the_available_list() -> None:
    k = ScriptedKernel()
    with pytest.raises(UnsupportedError) as err:
        ensure_cc(k, "hybla")
    msg = str(err.value)
    assert "transport.cc" in msg and "'hybla'" in msg and "available: reno cubic" in msg
    assert err.value.exit_code == 2


def test_ensure_cc_coupled_needs_no_module_but_the_bpf_toolchain(monkeypatch) -> None:
    import testbed.host.transport as tr

    k = ScriptedKernel()
    monkeypatch.setattr(tr, "coupled_problems", lambda: [])
    assert ensure_cc(k, "olia") == ["reno", "cubic"]       # registered later, by the run
    assert not any(a[0] == "modprobe" for _w, a in k.calls)
    monkeypatch.setattr(tr, "coupled_problems", lambda: ["no kernel BTF (/sys/kernel/btf)"])
    with pytest.raises(UnsupportedError) as err:
        ensure_cc(k, "lia", key="sweep.\"transport.cc\"")
    assert "BPF congestion control 'lia' cannot run here: no kernel BTF" in str(err.value)
    assert err.value.exit_code == 2


def test_apply_tcp_sets_and_reads_back_in_the_host() -> None:
    k, h = ScriptedKernel(), Host()
    applied = apply_tcp(k, h, cc="reno", rmem=65536,
                        extra={"net.ipv4.tcp_no_metrics_save": 1})
    assert applied["net.ipv4.tcp_congestion_control"] == "reno"
    assert applied["net.ipv4.tcp_rmem"] == "4096 65536 65536"
    assert applied["net.ipv4.tcp_no_metrics_save"] == "1"
    assert "net.ipv4.tcp_adv_win_scale" in applied
    writes = [a for w, a in k.calls if a[:3] == ["sysctl", "-q", "-w"]]
    assert all(w == "h1" for w, a in k.calls if a[:3] == ["sysctl", "-q", "-w"])
    assert len(writes) == 1 and len(writes[0]) == 6  # one program start for all three
    reads = [a for w, a in k.calls if w == "h1" and a[:2] == ["sysctl", "-n"]]
    assert len(reads[0]) == 5  # and one to read them back


def test_apply_tcp_non_namespaced_sysctl_is_unsupported() -> None:
    with pytest.raises(UnsupportedError, match=r"net.core.rmem_max=1 cannot be set in h1"):
        apply_tcp(ScriptedKernel(), Host(), cc=None, extra={"net.core.rmem_max": 1})
