"""Study P0 — MPTCP over WiFi + 3G.

Its specs (`quick/`, `full/`), `paper.toml`, README and `study.py` (its claims).
"""
