"""Study P2 — MPTCP over three paths in Mininet.

Its specs (`quick/`, `full/`), `paper.toml`, README and `study.py` (its claims).
"""
