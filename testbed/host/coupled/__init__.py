"""Coupled MPTCP congestion controls as BPF ``struct_ops`` programs (LIA, OLIA, BALIA,
wVegas): C sources in ``bpf/``, built by `build`, registered around a run by `loader`,
their logged decisions read by `trace`, and recomputed by the pure models in `reference`.
"""

from testbed.spec.model import COUPLED_CCS

COUPLED = COUPLED_CCS
