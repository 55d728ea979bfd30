"""Every data file of a default run on the bundled sample, byte for byte, against the
record in tests/data/sample_digests.json (made with scripts/output_digests.py).

A change that only moves code must leave this record alone. A change that means to
alter an output regenerates the record in the same commit and says why:

    python scripts/output_digests.py --sample --out tests/data/sample_digests.json
"""

from __future__ import annotations

import json
from pathlib import Path

import output_digests as od

RECORD = Path(__file__).parent / "data" / "sample_digests.json"


def test_sample_outputs_are_byte_identical_to_the_record(tmp_path):
    got = od.run_all(tmp_path / "data", sample=True, corpus_mb=None, workers=2)
    want = json.loads(RECORD.read_text())
    assert set(got) == {"raw", "cleaned", "dedup_exact", "dedup", "tokenizer", "pack"}
    assert all(got[s]["files"] for s in got)   # every stage wrote files, all compared
    diff = od.differences(want, got)
    assert not diff, "outputs differ from tests/data/sample_digests.json:\n" + "\n".join(diff[:20])


def test_the_reference_engine_writes_the_same_bytes(tmp_path):
    """The whole chain with --engine reference (the tutorial's readable code: is_clean and
    fastText's own model, exact_dedup, shingles/signature/candidate_pairs/find, corpus_iter
    with BpeTrainer, encode_shard and concat with HF's encoder) writes every data file of
    the record, kept signals and signatures included; only pack's count of which encoder
    ran differs."""
    got = od.run_all(tmp_path / "data", sample=True, corpus_mb=None, workers=2,
                     engine="reference")
    want = json.loads(RECORD.read_text())
    assert got["pack"]["counts"]["encoder"] == "reference"
    diff = od.differences(want, got, ignore=("encoder",))
    assert not diff, "--engine reference differs from the fast engine's record:\n" + \
        "\n".join(diff[:20])
    for stage in ("cleaned", "dedup_exact", "dedup", "tokenizer"):
        m = json.loads((tmp_path / "data" / stage / "manifest.json").read_text())
        assert m["engine"] == "reference", stage
