"""Sweeps on a Ray cluster: the head's executor (`executor`), what a node does for one run
(`node`) and how a finished bundle travels between them (`transfer`).  docs/cluster.md."""
