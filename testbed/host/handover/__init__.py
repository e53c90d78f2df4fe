"""P3's hand-over schemes at run time: telling the sender that its peer's interface
changed (`notifier`, `agent`), the ICMP that makes it retransmit at once (`icmp`), the
BPF map access this needs (`bpfmap`) and the per-hand-off log the programs keep (`log`).

The congestion controls themselves (``reno_ie``, ``reno_bwa``) are BPF programs in
``testbed/host/coupled/bpf/handover.h``, built and registered like the coupled ones.
docs/handover.md explains the mechanism and its limits.
"""
