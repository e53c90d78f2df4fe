"""The part of ``testbed vm`` that runs inside the VM.

Run as ``python -m testbed.machine.vm_guest -- CMD``.

It loads the kernel modules the testbed uses, starts Open vSwitch with its database in
the VM's private tmpfs (never the host's ``/etc/openvswitch``), runs CMD with the
output streamed, stops OVS again and exits with CMD's exit code.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from testbed.core.commands import CommandRunner, which

MODULES = ("sch_netem", "sch_htb", "sch_tbf", "openvswitch", "nf_tables", "tcp_bbr")
OVS_CTL = Path("/usr/share/openvswitch/scripts/ovs-ctl")
OVS_DBDIR = "/run/testbed-ovs"


def ovs_env() -> dict[str, str]:
    """Environment for ovs-ctl that keeps the OVS database inside the VM."""
    return {**os.environ, "OVS_DBDIR": OVS_DBDIR}


def start_ovs(runner: CommandRunner) -> bool:
    """Start ovsdb-server and ovs-vswitchd (private database); True when they run."""
    if not OVS_CTL.exists():
        return False
    Path(OVS_DBDIR).mkdir(parents=True, exist_ok=True)
    res = runner.run([str(OVS_CTL), "--system-id=random", "start"], env=ovs_env(),
                     check=False, timeout=120)
    if res.returncode != 0:
        print(f"testbed vm: could not start Open vSwitch: {res.stderr.strip()[-300:]}",
              file=sys.stderr)
        return False
    return True


def stop_ovs(runner: CommandRunner) -> None:
    """Stop the OVS daemons started by `start_ovs`."""
    runner.run([str(OVS_CTL), "stop"], env=ovs_env(), check=False, timeout=60)


def main(argv: list[str]) -> int:
    """Prepare the guest, run argv, clean up; return argv's exit code."""
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("testbed vm guest: no command", file=sys.stderr)
        return 2
    runner = CommandRunner()
    for mod in MODULES:
        runner.run(["modprobe", mod], check=False, timeout=30)
    if which("sysctl"):
        runner.run(["sysctl", "-qw", "net.mptcp.enabled=1"], check=False)
    ovs = start_ovs(runner)
    try:
        return runner.call(argv)
    finally:
        if ovs:
            stop_ovs(runner)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
