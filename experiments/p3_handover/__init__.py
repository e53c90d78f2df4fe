"""Study P3 — TCP congestion control across a vertical handover.

Its specs (`quick/`, `full/`), `paper.toml`, README and `study.py` (its claims).
"""
