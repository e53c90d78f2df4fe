"""The reproduced studies: one subpackage per study folder (``p0_wifi_3g``, ...).

Each study folder holds its specs (``quick/``, ``full/``), ``paper.toml``, a README and
``study.py`` with its claims and tables; `analysis.study_registry` finds them by folder.
``examples/`` holds example specs only (not a study, not a package).
"""
