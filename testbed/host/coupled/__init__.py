"""The testbed's congestion controls as BPF ``struct_ops`` programs: the coupled MPTCP
controls (LIA, OLIA, BALIA, wVegas) and P3's hand-over schemes (``reno_ie``,
``reno_bwa``, see `testbed.host.handover`).  C sources in ``bpf/``, built by `build`,
registered around a run by `loader`; the coupled controls' logged decisions are read by
`trace` and recomputed by the pure models in `reference`.
"""

from testbed.spec.model import BPF_CCS, COUPLED_CCS, HANDOVER_CCS

COUPLED = COUPLED_CCS
HANDOVER = tuple(HANDOVER_CCS.values())
ALL = BPF_CCS
