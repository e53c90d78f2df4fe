"""TCP settings of a host: congestion control, socket-buffer caps, extra sysctls.

Everything here runs inside one Mininet host's network namespace (``host=``), where
the ``net.ipv4.*`` TCP sysctls used below are per namespace (Linux >= 4.15), so two
hosts can run different congestion controls.  Two things are global:

* which congestion controls exist (``net.ipv4.tcp_available_congestion_control``)
  depends on the loaded modules.  Debian's 6.1 kernel loads only ``reno`` and
  ``cubic``; `ensure_cc` therefore tries ``modprobe tcp_<name>`` in the root namespace
  (``bbr``, ``vegas``, ``westwood``, ``htcp``, ``illinois``, ... are modules) and then
  validates; a name the kernel still lacks raises `UnsupportedError` naming the
  available ones (the CLI exits 2).  A loaded module stays loaded after the run.
* a namespace other than the root one may only make a congestion control its default
  if it is in ``net.ipv4.tcp_allowed_congestion_control`` (global; otherwise the
  sysctl fails with EPERM).  `ensure_cc` therefore adds the name to that list when it
  is missing (this only widens what unprivileged sockets may choose; it stays after
  the run and is reported by `apply_tcp`).
* the coupled MPTCP controls (``lia``, ``olia``, ``balia``, ``wvegas``) are BPF programs
  that `testbed.host.coupled.loader.CoupledControls` registers for the run; `ensure_cc`
  only checks that this machine can build and load them (`coupled_problems`).  They are
  not restricted, so no namespace needs them in the allowed list.
* ``net.core.*mem_max`` (caps on ``SO_RCVBUF``/``SO_SNDBUF``) are global; the caps
  here use ``tcp_rmem``/``tcp_wmem`` (per namespace), which bound buffer autotuning.

Receive window vs ``rmem``: ``rmem`` caps the receive *buffer*.  On 6.1 the advertised
window is about half of it (``tcp_adv_win_scale = 1``); from 6.6 the kernel uses the
measured payload/truesize ratio instead.  `buffer_sysctls` reports both values so
``metadata.json`` says which applies.

Route metrics (a profile's ``advmss`` and ``initcwnd``, `testbed.spec.profile`): the
segment size a host advertises and the initial window have no sysctl; they are metrics
of the route a connection uses.  `apply_route_metrics` reads the host's IPv4 unicast
routes (every table but ``local``) and changes each in place (``ip route change ...
advmss 1000 initcwnd 2``; routes live in the host's namespace too).  A dry run reads no
routes, so it lists no such command; a real run's ``metadata.json`` has the routes as
read back.

API::

    ccs = ensure_cc(runner, "bbr")                       # before the network starts
    applied = apply_tcp(runner, host, cc="reno", rmem=65536, wmem=None,
                        extra={"net.ipv4.tcp_no_metrics_save": 1})
    routes = apply_route_metrics(runner, host, {"advmss": "1000", "initcwnd": "2"})
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from testbed.core.commands import CommandRunner
from testbed.core.errors import CommandError, InputError, UnsupportedError
from testbed.core.transcript import Namespaced
from testbed.machine.bpf_support import coupled_problems
from testbed.spec.model import BPF_CCS
from testbed.spec.profile import without_route_metrics
from testbed.spec.sysctl import check_sysctls

AVAILABLE_CC = "net.ipv4.tcp_available_congestion_control"
ALLOWED_CC = "net.ipv4.tcp_allowed_congestion_control"
DEFAULT_CC = "net.ipv4.tcp_congestion_control"
_CC_RE = re.compile(r"^[a-z][a-z0-9_]{0,15}$")

ROUTES_ARGV = ["ip", "-4", "-o", "route", "show", "table", "all"]
# route types that are not forwarding paths of a connection (``ip route`` prints the type
# first for them; a unicast route starts with its destination)
_NOT_UNICAST = frozenset({"local", "broadcast", "multicast", "anycast", "blackhole",
                          "unreachable", "prohibit", "throw", "nat"})
# flags ``ip route show`` prints that ``ip route change`` does not take
_STATE_WORDS = frozenset({"linkdown", "dead", "offload", "trap", "rt_offload",
                          "rt_trap", "pervasive", "notify"})
ROUTE_METRICS = ("advmss", "initcwnd")

# Linux defaults (6.1): tcp_rmem "4096 131072 6291456", tcp_wmem "4096 16384 4194304".
RMEM_DEFAULT = 131072
WMEM_DEFAULT = 16384
BUF_MIN = 4096


def sysctl_write_argv(key: str, value: object) -> list[str]:
    """``sysctl -q -w key=value`` as an argv list.

    key: the sysctl name (dotted); value: its value (a list/tuple becomes space-separated).
    """
    if isinstance(value, (list, tuple)):
        value = " ".join(str(v) for v in value)
    return ["sysctl", "-q", "-w", f"{key}={value}"]


def sysctl_read_argv(key: str) -> list[str]:
    """``sysctl -n key`` as an argv list."""
    return ["sysctl", "-n", key]


def modprobe_cc_argv(cc: str) -> list[str]:
    """The ``modprobe`` command that loads congestion control cc (``tcp_<cc>``)."""
    return ["modprobe", "-q", f"tcp_{cc}"]


def parse_cc_list(text: str) -> list[str]:
    """Names in a ``tcp_available_congestion_control`` value (space separated)."""
    return text.split()


def check_cc_name(cc: str, key: str = "transport.cc") -> None:
    """Refuse a congestion-control name that cannot be a kernel CC (before any modprobe).

    cc: the name; key: the spec key to name in the error.
    """
    if not isinstance(cc, str) or not _CC_RE.match(cc):
        raise UnsupportedError(f"{key}: {cc!r} is not a congestion-control name; use e.g. "
                               "'cubic', 'reno' or 'bbr'")


def available_ccs(runner: CommandRunner, host: Namespaced | None = None) -> list[str]:
    """The congestion controls the kernel offers now.

    runner: the command runner; host: read inside this host (the list is global anyway).
    """
    out = runner.run(sysctl_read_argv(AVAILABLE_CC), host=host, record=False).stdout
    return parse_cc_list(out)


def ensure_cc(runner: CommandRunner, cc: str, key: str = "transport.cc") -> list[str]:
    """Make congestion control cc available (``modprobe tcp_<cc>`` if needed) or refuse it.

    Also adds cc to ``tcp_allowed_congestion_control`` so that host namespaces may make it
    their default.  runner: the command runner (root namespace); cc: the name;
    key: the spec key named in the error.  Returns the available list afterwards.
    Raises `UnsupportedError` listing the available controls when cc cannot be had.
    """
    check_cc_name(cc, key)
    have = available_ccs(runner)
    if cc in BPF_CCS:  # BPF programs the run registers (testbed.host.coupled)
        problems = coupled_problems()
        if problems:
            raise UnsupportedError(f"{key}: BPF congestion control {cc!r} cannot run "
                                   f"here: {'; '.join(problems)}")
        return have
    if cc not in have:
        runner.ok(modprobe_cc_argv(cc))
        have = available_ccs(runner)
    if cc not in have:
        raise UnsupportedError(
            f"{key}: congestion control {cc!r} is not available on this kernel "
            f"(modprobe tcp_{cc} did not provide it); available: {' '.join(have)}")
    allowed = parse_cc_list(runner.run(sysctl_read_argv(ALLOWED_CC), record=False).stdout)
    if cc not in allowed:
        runner.run(sysctl_write_argv(ALLOWED_CC, [*allowed, cc]))
    return have


def buffer_sysctls(rmem: int | None, wmem: int | None) -> dict[str, str]:
    """The ``tcp_rmem``/``tcp_wmem`` values that cap receive/send buffers.

    rmem, wmem: caps in bytes (None: leave the kernel default).  The initial value is
    the kernel default or the cap if smaller; the minimum is 4096 or the cap if smaller.
    """
    out: dict[str, str] = {}
    for key, cap, default in (("net.ipv4.tcp_rmem", rmem, RMEM_DEFAULT),
                              ("net.ipv4.tcp_wmem", wmem, WMEM_DEFAULT)):
        if cap is None:
            continue
        if cap < 1024:
            name = key.rsplit("_", 1)[-1]
            raise InputError(f"transport.{name}: {cap} bytes is too small; use at least 1KiB")
        out[key] = f"{min(BUF_MIN, cap)} {min(default, cap)} {cap}"
    return out


def write_sysctls(runner: CommandRunner, host: Namespaced | None,
                  values: Mapping[str, str]) -> dict[str, str]:
    """Write sysctls in host's namespace; return key -> value as read back.

    One ``sysctl -w`` for all of them and one ``sysctl -n`` to read them back (a program
    start costs about 0.4 s in the software-emulated VM).  A key that does not exist or
    is not writable in a namespace raises `UnsupportedError` naming it.
    """
    if not values:
        return {}
    where = host.name if host is not None else "the root namespace"
    assigns = [sysctl_write_argv(key, value)[3] for key, value in values.items()]
    res = runner.run(["sysctl", "-q", "-w", *assigns], host=host, check=False)
    if res.returncode != 0:
        for key, value in values.items():  # which one: one at a time, on this path only
            try:
                runner.run(sysctl_write_argv(key, value), host=host)
            except CommandError as exc:
                raise UnsupportedError(f"sysctl {key}={value} cannot be set in {where}: "
                                       f"{exc.stderr.strip() or exc}") from exc
        raise UnsupportedError(f"sysctl {' '.join(assigns)} failed in {where}: "
                               f"{res.stderr.strip()}")
    keys = list(values)
    lines = runner.run(["sysctl", "-n", *keys], host=host, record=False).stdout.splitlines()
    if len(lines) != len(keys):
        lines = [runner.run(sysctl_read_argv(k), host=host, record=False).stdout
                 for k in keys]
    return {k: " ".join(line.split()) for k, line in zip(keys, lines, strict=True)}


def apply_tcp(runner: CommandRunner, host: Namespaced, *, cc: str | None = None,
              rmem: int | None = None, wmem: int | None = None,
              extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Set the TCP congestion control, buffer caps and extra sysctls in host.

    runner: command runner; host: Mininet host; cc: default congestion control for new
    sockets (validated/loaded with `ensure_cc`); rmem/wmem: buffer caps in bytes;
    extra: more ``net.*`` sysctls.  Returns what was applied (sysctl -> value read back).
    """
    values: dict[str, str] = {}
    if cc is not None:
        ensure_cc(runner, cc)
        values[DEFAULT_CC] = cc
    values.update(buffer_sysctls(rmem, wmem))
    values.update(check_sysctls(extra or {}))
    applied = write_sysctls(runner, host, values)
    if cc is not None:
        applied[ALLOWED_CC] = " ".join(parse_cc_list(runner.run(
            sysctl_read_argv(ALLOWED_CC), record=False).stdout))
    if rmem is not None:
        applied["net.ipv4.tcp_adv_win_scale"] = runner.run(
            sysctl_read_argv("net.ipv4.tcp_adv_win_scale"), host=host, record=False,
            check=False).stdout.strip()
    return applied


def parse_routes(text: str) -> list[list[str]]:
    """The unicast routes in ``ip -4 -o route show table all`` output, each as its words
    without the flags that only report state (``linkdown``); routes of the ``local``
    table and typed routes (``local``, ``broadcast``, ...) are left out (pure)."""
    out = []
    for line in text.splitlines():
        words = [w for w in line.replace("\\", " ").split() if w not in _STATE_WORDS]
        if not words or words[0] in _NOT_UNICAST:
            continue
        if "table" in words and words[words.index("table") + 1:][:1] == ["local"]:
            continue
        out.append(words)
    return out


def without_metrics(route: list[str], metrics: Iterable[str] = ROUTE_METRICS) -> list[str]:
    """route's words without the given metrics and their values (``advmss 1000``,
    ``initcwnd lock 2``)."""
    return without_route_metrics(route, metrics)


def route_metric_argvs(routes: list[list[str]], metrics: Mapping[str, str]
                       ) -> list[list[str]]:
    """``ip route change <route> <metric> <value> ...`` for each route (pure).

    routes: `parse_routes` output; metrics: e.g. {"advmss": "1000", "initcwnd": "2"}
    ({}: no commands).  A metric the route already has is replaced.
    """
    if not metrics:
        return []
    for name, value in metrics.items():
        if name not in ROUTE_METRICS or not str(value).isdigit():
            raise InputError(f"route metric {name}={value!r}: use one of "
                             f"{', '.join(ROUTE_METRICS)} with a whole number")
    extra = [w for name, value in metrics.items() for w in (name, str(value))]
    return [["ip", "route", "change", *without_metrics(r, metrics), *extra] for r in routes]


def apply_route_metrics(runner: CommandRunner, host: Namespaced,
                        metrics: Mapping[str, str]) -> list[str]:
    """Put metrics on every IPv4 unicast route of host (see the module docstring).

    runner: command runner; host: Mininet host; metrics: metric -> value ({}: nothing
    is read or changed).  Returns the routes as read back afterwards (for
    ``metadata.json``).  A route the kernel refuses to change raises `CommandError`.
    """
    if not metrics:
        return []
    routes = parse_routes(runner.run(ROUTES_ARGV, host=host, record=False).stdout)
    argvs = route_metric_argvs(routes, metrics)
    if argvs:
        shell = runner.batch_shell("ip", host)
        try:
            shell.run(argvs)
        finally:
            shell.stop()
    return [" ".join(r) for r in parse_routes(
        runner.run(ROUTES_ARGV, host=host, record=False).stdout)]
