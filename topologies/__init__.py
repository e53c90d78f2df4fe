"""Topology builders: plain Mininet `Topo` subclasses, pure data (no root needed).

* `topologies.multipath.MultiHomedTopo` -- a multi-homed client, one chain per path.
* `topologies.fattree.FatTreeTopo` -- the k-ary fat-tree of the data-center study.

Each module also exports ``topos`` so ``mn --custom topologies/<module>.py --topo ...``
works.
"""
