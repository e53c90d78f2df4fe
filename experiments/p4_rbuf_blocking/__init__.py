"""Study P4 — Receive-buffer blocking in simultaneous multipath transfer.

Its specs (`quick/`, `full/`), `paper.toml`, README and `study.py` (its claims).
"""
