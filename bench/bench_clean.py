"""Benchmark: clean.py's five rules against the tutorial's is_clean + fastText.

    python bench/bench_clean.py              # 50 MB built from the bundled sample
    python bench/bench_clean.py --mb 10 --lid-chars 0

Both sides judge the same documents in this process (one core):

- reference: the tutorial's `is_clean` from section 2.3, verbatim (including its
  blank-line dup_lines bug), followed by fastText lid.176 `predict` on the full text
  with newlines replaced, for every document;
- ours: `clean.first_rule`, i.e. what a clean.py task does per document: the four cheap
  rules first (removed documents never reach fastText), numpy for the character rules,
  language ID on a bounded prefix re-read in full unless it is confidently accepted.

The corpus is cut into blocks; each block is timed for both sides, alternating which goes
first, so drifting load on a shared machine hits both alike. Throughput is text MB per
CPU-second of this process. Target (issue 3): ours >= 1.3x the reference.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

TARGET = 1.3
BLOCK_DOCS = 200


def is_clean(text: str) -> bool:
    """Section 2.3's is_clean, verbatim apart from the stats counter."""
    if len(text) < 200:
        return False

    lines = text.split("\n")
    if lines:
        dup_ratio = 1 - len(set(lines)) / len(lines)
        if dup_ratio > 0.30:
            return False

    if re.search(r"(.)\1{50,}", text):
        return False

    alnum = sum(c.isalnum() for c in text)
    if alnum / len(text) < 0.50:
        return False

    return True


def reference(model, texts: list[str]) -> int:
    """is_clean, then fastText on the full text of every document (as a naive script does)."""
    kept = 0
    for t in texts:
        ok = is_clean(t)
        labels, probs = model.predict(t.replace("\n", " "))
        kept += ok and probs[0] >= 0.8 and labels[0] in ("__label__en", "__label__zh")
    return kept


def ours(model, texts: list[str], th) -> int:
    import clean

    return sum(clean.first_rule(t, th, model)[0] is None for t in texts)


def run(corpus_texts: list[str], quick: bool = False, lid_chars: int | None = None) -> dict:
    """Time reference and ours on corpus_texts; rows of {name, mb_per_s_per_core, ratio,
    target, ok}. quick: one pass, no warm-up (for the smoke test)."""
    import clean

    th = clean.Thresholds() if lid_chars is None else clean.Thresholds(lid_chars=lid_chars)
    model = clean.load_lid(clean.default_lid_model())
    clean.alnum_table()  # built once per process; not part of per-document cost
    if not quick:  # warm caches for both sides
        reference(model, corpus_texts[:50])
        ours(model, corpus_texts[:50], th)
    cpu = {"reference": 0.0, "ours": 0.0}
    kept = {"reference": 0, "ours": 0}
    for b, start in enumerate(range(0, len(corpus_texts), BLOCK_DOCS)):
        block = corpus_texts[start:start + BLOCK_DOCS]
        sides = [("reference", lambda: reference(model, block)), ("ours", lambda: ours(model, block, th))]
        for name, fn in (sides if b % 2 == 0 else sides[::-1]):
            c0 = time.process_time()
            kept[name] += fn()
            cpu[name] += time.process_time() - c0
    mb = sum(len(t.encode("utf-8")) for t in corpus_texts) / 1e6

    def rate(s: float) -> float:
        return mb / s if s > 0 else float("inf")

    ref_rate, our_rate = rate(cpu["reference"]), rate(cpu["ours"])
    ratio = our_rate / ref_rate
    rows = [
        {"name": "reference (is_clean + fastText full text)", "mb_per_s_per_core": ref_rate,
         "ratio": None, "target": None, "ok": None},
        {"name": f"clean.first_rule (lid_chars={th.lid_chars})", "mb_per_s_per_core": our_rate,
         "ratio": ratio, "target": TARGET, "ok": ratio >= TARGET, "ours": True},
    ]
    return {"bench": "clean", "mb": mb, "docs": len(corpus_texts), "kept": kept,
            "lid_chars": th.lid_chars, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=50, help="corpus size (default 50 MB)")
    p.add_argument("--lid-chars", type=int, default=None,
                   help="clean.py's --lid-chars for our side (default: clean.py's default)")
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(argv)
    from run_all import build_corpus

    from dataprep.report import table

    res = run(build_corpus(a.mb), quick=a.quick, lid_chars=a.lid_chars)
    print(f"{res['mb']:.1f} MB, {res['docs']:,} documents; kept: reference "
          f"{res['kept']['reference']:,}, ours {res['kept']['ours']:,} "
          "(they differ: the reference's dup_lines counts blank lines)")
    print(table(["implementation", "MB/s per core", "ratio", "target", "ok"],
                [[r["name"], round(r["mb_per_s_per_core"], 2),
                  "" if r["ratio"] is None else f"{r['ratio']:.2f}x",
                  "" if r["target"] is None else f">= {r['target']}x",
                  "" if r["ok"] is None else ("yes" if r["ok"] else "NO")] for r in res["rows"]]))
    return 0 if all(r["ok"] is not False for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
