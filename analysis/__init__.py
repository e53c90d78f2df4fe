"""Analysis: captures -> packet tables -> flows -> metrics -> plots -> report.

Modules, in data-flow order::

    pcap.py         read_packets(path) -> PacketTable   (pcap / pcapng, chunked, vectorised)
    pcap_classic.py, pcapng.py, pcap_records.py   the two formats' record walkers
    decode.py       link (Ethernet, SLL, SLL2, raw, loopback) / IPv4 / IPv6 / TCP / UDP / options
    table.py        the column registry of the packet table and its side tables
    flows.py        find_flows(table): TCP connections, UDP flows, MPTCP grouping by token
    sequence.py     grouped sequence arithmetic, reordering (RFC 4737)
    metrics.py      per-flow metrics: sequence analysis, FCT, RTT, delivered bytes
    dsn.py          MPTCP data level (DSN) and the connection table
    series.py       throughput / goodput time series
    order.py        out-of-order share against the sender's order
    capture.py      CaptureAnalysis.of(path): all of the above for one capture
    bundle.py       analyze_bundle(run_dir) -> headline dict; writes RUN/metrics/*.parquet
    samples.py      samples/*.jsonl -> fixed-schema tables; atomic file writes
    fidelity.py     the ok / warn / fail verdict of a run
    plots.py        matplotlib figures (PNG + SVG)
    report.py       write_report(dir) -> report.html for a run or a sweep (pluggable sections:
                    report_context.py, report_sections.py, report_fidelity.py)
    tshark.py       tshark argv builders and parsers (reference for tests and the benchmark)

Studies (one folder each under ``experiments/``, with its ``study.py``)::

    study_registry.py   StudyRegistry: the studies, found by folder
    claims.py           Comparison, Claim, StudyResult; a study's paper.toml
    study_tables.py     what `testbed study` wrote, read back (run_table, workload_rate, ...)
    study_figures.py    a study's redrawn figures: StudyFigure, paper overlays, write_figures
    study_text.py       a claim's verdict in words, ratios, measured values as text
    study_report.py     evaluate(study, out), write_study_report -> out/report.html

Command line::

    testbed analyze run/pcap/*.pcap --out /tmp/a     # per-flow table + parquet
    testbed report RUN_OR_SWEEP_DIR [--paper paper.toml]

Where analysis deliberately differs from tshark's ``tcp.analysis`` flags (tests in
``tests/unit/analysis/test_tshark_crosscheck.py`` pin each case): tshark decides
"retransmission" vs "out-of-order" from timing (the first RTT as threshold); analysis uses
the sequence numbers already seen and the sender's TCP timestamps.  So a retransmission that
arrives quickly is a retransmission here (tshark: out-of-order, Wireshark issue 13863) and a
segment the network delayed longer than one RTT is reordered here (tshark: retransmission).
Without TCP timestamps a segment below the highest sequence number that brings bytes no
earlier segment carried counts as reordered (one that brings none is a retransmission,
whatever its boundaries).  tshark's relative ``mptcp.dsn`` starts at 1, ours at 0.

Limits: MPTCP subflows are grouped only when the connection's MP_CAPABLE keys (or a join's
token matching them) were captured; the packet table (about 80 bytes per packet) and the
per-capture analysis tables must fit in memory, the capture itself need not (it is read in
chunks).  Reader limits (records, blocks, timestamps) and time-series bins: docs/results.md,
"Capture reader".
"""
