"""Study P1 — Packet-based load balancing in a k=4 fat-tree.

Its specs (`quick/`, `full/`), `paper.toml`, README and `study.py` (its claims).
"""
