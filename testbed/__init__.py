"""Multipath Testbed: Mininet-based emulation for MPTCP and data-center load balancing."""

__version__ = "0.1.0"
