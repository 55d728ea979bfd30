"""Benchmark: the FineWeb / Gopher / C4 packs, our compiled signals against datatrove.

    python bench/bench_quality_signals.py               # 250 MB of the benchmark corpus
    python bench/bench_quality_signals.py --mb 20       # a quick look
    python bench/bench_quality_signals.py --quick       # the bundled sample, once

For every pack, both sides judge the same documents in this process (one core):

- reference: datatrove 0.10.1's own filter (bench/datatrove_packs.py: the published
  defaults; C4 at document level), one Document per text, as a datatrove pipeline runs it;
- ours: algorithms.quality_signals_fast.measure on a batch of 1,024 documents from an
  Arrow column (every signal of the pack in one compiled pass), then the thresholds of
  every rule of the pack (algorithms/rule_packs.py), as datatrove applies them all to
  every document.

The corpus is cut into blocks; each block is timed for both sides, alternating which goes
first, so drifting load on a shared machine hits both alike. Throughput is text MB per
CPU-second of this process (all documents of the prefix, every language). The decisions
are compared document by document on the documents without CJK characters: on the others
ours differ by design (one word per CJK character; datatrove's English tokenizer makes a
word of a whole Chinese clause). Target: ours >= 5x datatrove on every pack, decisions
equal on >= 99% of the compared documents.

Then, without targets, where the packs' time goes: the words alone (datatrove's word
tokenizer against ours, on a few blocks spread over the corpus) and ours with every pack
in one pass, as clean.py measures them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

TARGET = 5.0
AGREEMENT = 0.99
BLOCK_DOCS = 1024
WORD_BLOCKS = 5     # blocks on which datatrove's word tokenizer alone is timed


def reference(pack: str, texts: list[str]) -> list[bool]:
    from datatrove.data import Document

    from datatrove_packs import filters
    f = filters()[pack]
    return [f.filter(Document(text=t, id=str(i))) is True for i, t in enumerate(texts)]


def ours(pack: str, col):
    import numpy as np

    from algorithms import rule_packs
    from algorithms.quality_signals_fast import measure
    values = measure(pack, col)
    removed = np.zeros(len(col), bool)
    for r in rule_packs.PACKS[pack]:
        removed |= r.removed(values[r.signal.split(".", 1)[1]], r.threshold)
    return ~removed


def run(corpus_texts: list[str], quick: bool = False) -> dict:
    """Time reference and ours per pack; rows of {name, mb_per_s_per_core, ratio, target, ok}."""
    import pyarrow as pa

    from algorithms import quality_signals as Q
    from algorithms.quality_signals_fast import tables

    tables()
    blocks = [corpus_texts[s:s + BLOCK_DOCS] for s in range(0, len(corpus_texts), BLOCK_DOCS)]
    cols = [pa.array(b, pa.string()) for b in blocks]
    mb = sum(len(t.encode("utf-8")) for t in corpus_texts) / 1e6
    plain = [not any(map(Q.is_cjk, t)) for t in corpus_texts]
    compared = sum(plain)
    rows, detail = [], {}
    for pack in Q.PACKS:
        reference(pack, corpus_texts[:20])            # warm both sides
        ours(pack, cols[0].slice(0, 20))
        cpu = {"reference": 0.0, "ours": 0.0}
        differ = 0
        for b, (texts, col) in enumerate(zip(blocks, cols)):
            res = {}
            sides = [("reference", lambda: reference(pack, texts)), ("ours", lambda: ours(pack, col))]
            for name, fn in (sides if b % 2 == 0 else sides[::-1]):
                c0 = time.process_time()
                res[name] = fn()
                cpu[name] += time.process_time() - c0
            differ += sum(a != bool(o) for a, o, c in zip(res["reference"], res["ours"],
                                                           plain[b * BLOCK_DOCS:]) if c)
        ref_rate = mb / cpu["reference"] if cpu["reference"] else float("inf")
        our_rate = mb / cpu["ours"] if cpu["ours"] else float("inf")
        agree = 1 - differ / compared if compared else 1.0
        ratio = our_rate / ref_rate
        detail[pack] = {"differ": differ, "agreement": agree}
        rows.append({"name": f"{pack}: datatrove filter", "mb_per_s_per_core": ref_rate,
                     "ratio": None, "target": None, "ok": None})
        rows.append({"name": f"{pack}: ours (measure + decide); decisions equal on "
                             f"{agree:.3%} of {compared:,} documents without CJK",
                     "mb_per_s_per_core": our_rate, "ratio": ratio,
                     "target": f">= {TARGET:g}x, agreement >= {AGREEMENT:.0%}",
                     "ok": ratio >= TARGET and agree >= AGREEMENT, "ours": True})
    rows += shared_work(blocks, cols, mb)
    return {"bench": "quality_signals", "mb": mb, "docs": len(corpus_texts),
            "packs": detail, "rows": rows}


def shared_work(blocks, cols, mb: float) -> list[dict]:
    """What every pack needs, timed alone: the words, cut by datatrove's word tokenizer
    (spaCy's English rules) against ours (the texts decoded and cut into words, nothing
    measured: measure_packs with no pack), on WORD_BLOCKS blocks spread over the corpus
    (datatrove's tokenizer runs at about 0.7 MB/s); then ours with every pack in one pass
    (measure_packs), on every block (mb in all). No targets: they show where the packs'
    time goes."""
    from common import blocks_text, spread
    from datatrove.utils.word_tokenizers import load_word_tokenizer

    from algorithms import quality_signals as Q
    from algorithms.quality_signals_fast import measure_packs

    tok = load_word_tokenizer("en")
    tok.word_tokenize(blocks[0][0])
    measure_packs([], cols[0].slice(0, 20))
    sampled = spread(len(blocks), WORD_BLOCKS)
    cpu = {"reference": 0.0, "ours": 0.0, "every pack": 0.0}
    mb_sampled = 0.0
    for b, (texts, col) in enumerate(zip(blocks, cols)):
        sides = [("every pack", lambda: measure_packs(list(Q.PACKS), col))]
        if b in sampled:
            mb_sampled += sum(len(t.encode("utf-8")) for t in texts) / 1e6
            sides += [("reference", lambda: [tok.word_tokenize(t) for t in texts]),
                      ("ours", lambda: measure_packs([], col))]
        for name, fn in (sides if b % 2 == 0 else sides[::-1]):
            c0 = time.process_time()
            fn()
            cpu[name] += time.process_time() - c0
    words_ref = mb_sampled / cpu["reference"] if cpu["reference"] else float("inf")
    words_ours = mb_sampled / cpu["ours"] if cpu["ours"] else float("inf")
    packs = mb / cpu["every pack"] if cpu["every pack"] else float("inf")
    return [
        {"name": f"words: datatrove's word tokenizer (spaCy's English rules; "
                 f"{blocks_text(sampled, mb_sampled)})",
         "mb_per_s_per_core": words_ref, "ratio": None, "target": None, "ok": None},
        {"name": "words: ours, decoded and cut into words, nothing measured (same blocks)",
         "mb_per_s_per_core": words_ours, "ratio": words_ours / words_ref, "target": None,
         "ok": None},
        {"name": "every pack in one pass: ours (measure_packs, every block)",
         "mb_per_s_per_core": packs, "ratio": None, "target": None, "ok": None},
    ]

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=250, help="corpus size (default 250 MB)")
    p.add_argument("--corpus", type=Path, default=None,
                   help="folder of parquet shards (default data/bench_corpus)")
    p.add_argument("--quick", action="store_true", help="the bundled sample, read once")
    a = p.parse_args(argv)
    from common import CORPUS, corpus_texts, cpu_flags, cpu_model

    from pipeline.tables import table

    texts = corpus_texts(a.mb, corpus=a.corpus or CORPUS, quick=a.quick)
    res = run(texts, quick=a.quick)
    print(f"CPU: {cpu_model()}; {cpu_flags()}")
    print(f"{res['mb']:.1f} MB, {res['docs']:,} documents, one core")
    print(table(["implementation", "MB/s per core", "ratio", "target", "ok"],
                [[r["name"], round(r["mb_per_s_per_core"], 2),
                  "" if r["ratio"] is None else f"{r['ratio']:.1f}x",
                  r["target"] or "",
                  "" if r["ok"] is None else ("yes" if r["ok"] else "NO")] for r in res["rows"]]))
    return 0 if all(r["ok"] is not False for r in res["rows"]) else 1


if __name__ == "__main__":
    from pipeline.requirements import require

    require("bench/bench_quality_signals.py", "requirements-bench.txt")
    sys.exit(main())
