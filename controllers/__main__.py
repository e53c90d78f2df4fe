"""``python -m controllers <app> [--port N] (--topo fattree,K | --layout FILE) [--status FILE]``.

Runs one fabric app under os-ken (4.x ships no ``osken-manager``), listening on
127.0.0.1 only.  An unknown app, a bad topology or one the app cannot route prints one
``error:`` line and exits with code 2.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from controllers import layout_for
from controllers.hubfix import use_own_task_exit
from controllers.registry import REGISTRY, ControllerRegistry, app_module, canonical_app
from testbed.core.errors import InputError

LISTEN_HOST = "127.0.0.1"
DEFAULT_PORT = 6653


def build_parser(registry: ControllerRegistry = REGISTRY) -> argparse.ArgumentParser:
    """The launcher's command line; the apps and their help come from registry."""
    apps = "\n".join(textwrap.fill(a.description, 79, initial_indent=f"  {a.name:<12} ",
                                    subsequent_indent=" " * 15) for a in registry)
    ap = argparse.ArgumentParser(prog="python -m controllers",
                                 description="Run a fabric SDN app (os-ken, OpenFlow 1.3).",
                                 epilog=f"apps:\n{apps}",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("app", help=f"one of: {', '.join(registry.names())}")
    ap.add_argument("--port", type=int, default=DEFAULT_PORT,
                    help="OpenFlow TCP port on 127.0.0.1 (default 6653)")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--topo", default=None, help="topology, e.g. fattree,4 (the default)")
    src.add_argument("--layout", type=Path, default=None,
                     help="layout JSON file (FabricLayout.to_dict())")
    ap.add_argument("--status", type=Path, default=None,
                    help="append JSON-lines status (ready/error per switch) to this file")
    ap.add_argument("--verbose", action="store_true", help="debug logging")
    return ap


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse the launcher's command line."""
    return build_parser().parse_args(list(argv))


def load_layout(args: argparse.Namespace):
    """The layout named by --topo or --layout (raises `InputError` subclasses)."""
    if args.layout is not None:
        try:
            data = json.loads(args.layout.read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"--layout {args.layout}: cannot read JSON ({exc}); write it with "
                             "FabricLayout.to_dict()") from exc
        return layout_for(data)
    return layout_for(args.topo or "fattree,4")


def run(module: str, port: int, context: object) -> None:
    """Run the os-ken app module with the fabric context until it stops.

    module: app module path; port: OpenFlow port; context: the `FabricContext`.
    Mirrors ``AppManager.run_apps`` but hands ``fabric=context`` to the app.
    """
    from os_ken import cfg
    from os_ken.base.app_manager import AppManager
    from os_ken.lib import hub

    # without this, one exception in a handler silently ends the app's event thread
    use_own_task_exit(hub)
    cfg.CONF(args=["--ofp-tcp-listen-port", str(port), "--ofp-listen-host", LISTEN_HOST],
             project="os_ken")
    mgr = AppManager.get_instance()
    mgr.load_apps([module])
    contexts = mgr.create_contexts()
    services = mgr.instantiate_apps(fabric=context, **contexts)
    try:
        hub.joinall(services)
    finally:
        mgr.close()
        for t in services:
            t.kill()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (2 for user errors)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from controllers.paths import compute_routes

    # Importing Mininet (through topologies.fattree) installs its own logger class for every
    # logger created afterwards, which silences os-ken's loggers; this process never uses
    # Mininet, so restore the standard class before os-ken is imported.
    logging.setLoggerClass(logging.Logger)
    # SIGUSR1 writes every thread's stack to stderr (the log): `ControllerProcess` asks
    # for it when switches are not programmed in time, to show where the app waits
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        app = canonical_app(args.app)
        routes = compute_routes(load_layout(args))
        if not 0 < args.port < 65536:
            raise InputError(f"--port {args.port} is not a TCP port; use 1-65535")
    except (InputError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from controllers.base import FabricContext

    logging.getLogger("controllers").info("app %s on %s:%d, %s k=%d, %d switches", app,
                                          LISTEN_HOST, args.port, routes.layout.kind,
                                          routes.layout.k, len(routes.layout.switches))
    try:
        run(app_module(app), args.port, FabricContext(routes, args.status))
    except KeyboardInterrupt:
        # os-ken's native hub threads cannot be cancelled; leave without waiting for them
        logging.shutdown()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
