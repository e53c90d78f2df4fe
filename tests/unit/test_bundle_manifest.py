"""``manifest.sha256``: what a run recorded, by sha256, written when it ends and checked by
`testbed verify` -- and by ``sha256sum -c``, the independent tool (docs/bundle.md)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from testbed.core.safefiles import SYMLINK
from testbed.results.bundle import SHA256_MANIFEST, Bundle

SHA256SUM = shutil.which("sha256sum")


@pytest.fixture
def bundle(tmp_path):
    root = tmp_path / "run-r1"
    for rel, data in {"spec.toml": "name = 'x'\n", "transcript.jsonl": "{}\n",
                      "pcap/h1-h1-eth0.pcap": "\x00" * 100, "samples/flows.jsonl": "{}\n",
                      "logs/tc.txt": "qdisc\n", "metadata.json": "{}",
                      "metrics/flows.parquet": "p", "figures/a.png": "i",
                      "report.html": "<html>", "pcap/x.tmp": "partial"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(data)
    return Bundle(root)


def test_the_manifest_lists_what_the_run_recorded_and_sha256sum_accepts_it(bundle):
    assert bundle.write_sha256_manifest() == 5
    lines = (bundle.root / SHA256_MANIFEST).read_text().splitlines()
    assert [line.split("  ", 1)[1] for line in lines] == [
        "logs/tc.txt", "pcap/h1-h1-eth0.pcap", "samples/flows.jsonl", "spec.toml",
        "transcript.jsonl"]  # not metadata.json, metrics/, figures/, report.html, *.tmp
    assert bundle.check_sha256_manifest() == []
    # analysis and reports may write again without breaking it
    (bundle.root / "metrics" / "flows.parquet").write_text("recomputed")
    (bundle.root / "metadata.json").write_text('{"status": "complete"}')
    assert bundle.check_sha256_manifest() == []
    if SHA256SUM:
        res = subprocess.run([SHA256SUM, "--quiet", "-c", SHA256_MANIFEST], cwd=bundle.root,
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr


def test_a_changed_missing_or_unlisted_file_is_named(bundle):
    bundle.write_sha256_manifest()
    (bundle.root / "pcap" / "h1-h1-eth0.pcap").write_text("\x01" * 100)  # same size
    (bundle.root / "samples" / "flows.jsonl").unlink()
    (bundle.root / "samples" / "ping.jsonl").write_text("{}\n")
    assert bundle.check_sha256_manifest() == [
        "pcap/h1-h1-eth0.pcap: changed since the run recorded it",
        "samples/flows.jsonl: missing",
        "samples/ping.jsonl: not in manifest.sha256"]
    if SHA256SUM:
        res = subprocess.run([SHA256SUM, "--quiet", "-c", SHA256_MANIFEST], cwd=bundle.root,
                             capture_output=True, text=True)
        assert res.returncode != 0 and "h1-h1-eth0.pcap: FAILED" in res.stdout


def test_a_crafted_manifest_reads_nothing_outside_the_bundle(bundle, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("outside")
    os.symlink(secret, bundle.root / "samples" / "link.jsonl")
    bundle.write_sha256_manifest()
    assert "samples/link.jsonl" not in (bundle.root / SHA256_MANIFEST).read_text()
    (bundle.root / SHA256_MANIFEST).write_text(
        f"{'0' * 64}  ../secret\n{'0' * 64}  samples/link.jsonl\n"
        f"{'0' * 64}  /etc/passwd\nnot a line\n")
    problems = bundle.check_sha256_manifest()
    assert problems[:4] == [
        "../secret: outside the folder", f"samples/link.jsonl: {SYMLINK}",
        "/etc/passwd: outside the folder",
        "manifest.sha256 line 4 is not '<sha256>  <path>'"]
    assert len(problems) == 4 + 5  # and the five recorded files it no longer lists


def test_a_bundle_without_a_manifest_says_so(bundle):
    assert bundle.check_sha256_manifest() == ["no manifest.sha256"]
