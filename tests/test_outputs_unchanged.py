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
