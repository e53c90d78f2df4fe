"""What tcpdump's closing packet counts say about a capture file (pure arithmetic).

tcpdump reports ``captured`` (written to the file), ``received`` (handed over by the
kernel, including the packets it dropped) and ``dropped`` (by the kernel).  The capture
(`testbed.host.capture`) checks these counts while it drains a running tcpdump; the report
(`analysis.report_sections`) reads them back from a bundle's ``metadata.json`` to warn
about incomplete captures.  Both layers sit above this one, so the arithmetic lives here.
"""

from __future__ import annotations


def shortfall(counts: dict[str, int | None], loopback: bool = False
              ) -> tuple[int, int] | None:
    """(dropped by the kernel, handed over but not written) from tcpdump's counts
    (captured / received / dropped); None when they are unknown (pure).

    ``received`` includes the packets the kernel dropped.  On loopback the kernel counts
    every packet twice (as sent and as received) and libpcap keeps one copy."""
    captured, received = counts.get("captured"), counts.get("received")
    if captured is None or received is None:
        return None
    dropped = int(counts.get("dropped") or 0)
    handed = int(received) - dropped
    if loopback:
        handed, dropped = handed // 2, dropped // 2
    return dropped, max(0, handed - int(captured))
