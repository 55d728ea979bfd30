"""Benchmark: clean.py's five rules against the tutorial's is_clean + fastText.

    python bench/bench_clean.py              # 250 MB of the benchmark corpus
    python bench/bench_clean.py --mb 50 --lid-chars 200

Both sides judge the same documents in this process (one core):

- reference: the tutorial's `is_clean` from section 2.3, verbatim (including its
  blank-line dup_lines bug), followed by the real fastText lid.176 `predict` on the full
  text with newlines replaced, for every document;
- ours: what a clean.py task does with a batch of 1,024 documents from a parquet record
  batch: the four cheap signals in one compiled pass over the UTF-8 bytes
  (algorithms.cleaning_fast), then language ID on the documents that reach it, through
  algorithms.langid_fast.FastLid (fastText's prediction reimplemented) on the Arrow column.

The corpus is cut into blocks; each block is timed for both sides, alternating which goes
first, so drifting load on a shared machine hits both alike. Throughput is text MB per
CPU-second of this process. Target (issue 12): ours >= 1.5x the reference, with language
decisions equal to full-text fastText on at least 99.9% of the documents: the documents
where ours decides the language rule differently are counted (each one named).

clean.py with every rule pack (the five rules and the four packs, 36 rules) is timed on
the same blocks. Its target (issue 25: at least 5x) is measured against the reference
doing the same 36 rules: the tutorial's clean, then datatrove's four filters
(bench/datatrove_packs.py), each on the documents the one before kept, as a pipeline of
them would run (datatrove's filters also stop at a document's first failing rule, while
ours measure every signal of every document). That reference runs at about 1.5 MB/s, so
it is timed on CHAIN_BLOCKS blocks spread over the corpus, and ours on the same blocks.
The ratio against the tutorial's clean alone, which does 5 of those 36 rules, is printed
too, without a target: docs/benchmarks.md says why.
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

TARGET = 1.5
AGREEMENT = 0.999
BLOCK_DOCS = 1024   # a clean.py task's record batch
PACKS_TARGET = 5.0  # clean with every pack against the reference doing the same rules
CHAIN_BLOCKS = 5    # blocks on which that reference (about 1.5 MB/s) is timed


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


def fasttext_model():
    """The real fastText, as the tutorial (and the reference) uses it."""
    import fasttext

    from algorithms import langid

    try:  # load_model prints a deprecation warning on every load
        fasttext.FastText.eprint = lambda *a, **k: None
    except AttributeError:
        pass
    return fasttext.load_model(str(langid.default_lid_model()))


def reference(model, texts: list[str]) -> tuple[int, list[bool], list[bool]]:
    """is_clean, then fastText on the full text of every document (as a naive script
    does). Returns (kept, the full-text language decision of every document, whether
    each document is kept)."""
    kept, lang_ok, keep = 0, [], []
    for t in texts:
        ok = is_clean(t)
        labels, probs = model.predict(t.replace("\n", " "))
        good = min(1.0, float(probs[0])) >= 0.8 and labels[0] in ("__label__en", "__label__zh")
        lang_ok.append(good)
        keep.append(ok and good)
        kept += ok and good
    return kept, lang_ok, keep


def reference_packs(packs, texts: list[str]) -> int:
    """datatrove's filters of `packs` in order, each on the documents the one before kept
    (the tutorial's clean has run first): how many are left."""
    from datatrove.data import Document

    from datatrove_packs import filters
    docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
    for pack in packs:
        f = filters()[pack]
        docs = [d for d in docs if f.filter(d) is True]
    return len(docs)


def ours(model, block, th) -> tuple[int, object, object]:
    """One clean.py batch: (kept, outcome codes, the signals measured)."""
    from algorithms import cleaning

    col = block.column(0)
    sig = cleaning.Signals.measure(th.signals(), col)
    lid = cleaning.LidCalls(model, sig, lambda i: col[i].as_py() or "", th.lid_chars, lambda: col)
    code = cleaning.Decider(th, sig, lid).outcomes()
    return int((code == len(th.rules)).sum()), code, sig


def our_lang_ok(code) -> list[bool | None]:
    """Our language decision for each document that reached the language rule (None for
    the ones an earlier rule removed: the reference is compared on the rest)."""
    from algorithms import cleaning

    lang, kept = len(cleaning.TUTORIAL) - 1, len(cleaning.TUTORIAL)
    return [None if c < lang else bool(c == kept) for c in code]


def run(corpus_texts: list[str], quick: bool = False, lid_chars: int | None = None) -> dict:
    """Time reference and ours on corpus_texts; rows of {name, mb_per_s_per_core, ratio,
    target, ok}. quick: one pass, no warm-up (for the smoke test)."""
    import pyarrow as pa
    from common import blocks_text, spread

    from algorithms import cleaning, langid

    th = cleaning.Recipe() if lid_chars is None else cleaning.Recipe(lid_chars=lid_chars)
    packs = ("tutorial", *cleaning.QUALITY_PACKS)
    every = cleaning.Recipe(tuple(r for p in packs for r in cleaning.load_rules(p)),
                            lid_chars=th.lid_chars, packs=packs)
    ft = fasttext_model()
    fast = langid.load_lid(langid.default_lid_model())
    blocks = [pa.table({"text": pa.array(corpus_texts[s:s + BLOCK_DOCS], pa.string())})
              for s in range(0, len(corpus_texts), BLOCK_DOCS)]
    if not quick:  # warm caches and compiled code for both sides
        reference(ft, corpus_texts[:50])
        reference_packs(cleaning.QUALITY_PACKS, corpus_texts[:50])
        ours(fast, blocks[0].slice(0, 50), th)
        ours(fast, blocks[0].slice(0, 50), every)
    cpu = {"reference": 0.0, "ours": 0.0, "every pack": 0.0}
    kept = {"reference": 0, "ours": 0}
    # the same 36 rules done by the reference, on CHAIN_BLOCKS blocks spread over the corpus
    chained = spread(len(blocks), CHAIN_BLOCKS)
    same = {"reference": 0.0, "every pack": 0.0, "mb": 0.0}
    differ, compared = [], 0
    for b, block in enumerate(blocks):
        texts = block.column(0).to_pylist()   # the reference's input; not timed for ours
        res, tb = {}, {}
        sides = [("reference", lambda: reference(ft, texts)), ("ours", lambda: ours(fast, block, th)),
                 ("every pack", lambda: ours(fast, block, every))]
        for name, fn in (sides if b % 2 == 0 else sides[::-1]):
            c0 = time.process_time()
            res[name] = fn()
            tb[name] = time.process_time() - c0
            cpu[name] += tb[name]
        if b in chained:
            kept_texts = [t for t, k in zip(texts, res["reference"][2]) if k]
            c0 = time.process_time()
            reference_packs(cleaning.QUALITY_PACKS, kept_texts)
            same["reference"] += tb["reference"] + time.process_time() - c0
            same["every pack"] += tb["every pack"]
            same["mb"] += sum(len(t.encode("utf-8")) for t in texts) / 1e6
        kept["reference"] += res["reference"][0]
        kept["ours"] += res["ours"][0]
        ref_lang = res["reference"][1]
        for i, mine in enumerate(our_lang_ok(res["ours"][1])):
            if mine is None:
                continue
            compared += 1
            if mine != ref_lang[i]:
                differ.append(b * BLOCK_DOCS + i)
    mb = sum(len(t.encode("utf-8")) for t in corpus_texts) / 1e6

    def rate(s: float) -> float:
        return mb / s if s > 0 else float("inf")

    ref_rate, our_rate = rate(cpu["reference"]), rate(cpu["ours"])
    ratio = our_rate / ref_rate
    all_rate = rate(cpu["every pack"])
    same_ref = same["mb"] / same["reference"] if same["reference"] > 0 else float("inf")
    same_ours = same["mb"] / same["every pack"] if same["every pack"] > 0 else float("inf")
    agree = 1 - len(differ) / compared if compared else 1.0
    rows = [
        {"name": "reference (is_clean + fastText full text)", "mb_per_s_per_core": ref_rate,
         "ratio": None, "target": None, "ok": None},
        {"name": f"clean.py batch (lid_chars={th.lid_chars}); language decisions equal to "
                 f"full-text fastText on {agree:.4%} of {compared:,} documents",
         "mb_per_s_per_core": our_rate, "ratio": ratio,
         "target": f">= {TARGET}x, agreement >= {AGREEMENT:.1%}",
         "ok": ratio >= TARGET and agree >= AGREEMENT, "ours": True},
        {"name": f"clean.py batch with every rule pack ({', '.join(packs)}: "
                 f"{len(every.rules)} rules), against the reference above, which does 5 "
                 "of them (no target: docs/benchmarks.md)", "mb_per_s_per_core": all_rate,
         "ratio": all_rate / ref_rate, "target": None, "ok": None},
        {"name": f"reference with every rule pack: is_clean + fastText, then datatrove's "
                 f"{', '.join(cleaning.QUALITY_PACKS)} filters on what each kept "
                 f"({blocks_text(chained, same['mb'])})",
         "mb_per_s_per_core": same_ref, "ratio": None, "target": None, "ok": None},
        {"name": f"clean.py batch with every rule pack ({len(every.rules)} rules) on the "
                 "same blocks, against the reference doing the same rules",
         "mb_per_s_per_core": same_ours, "ratio": same_ours / same_ref,
         "target": f">= {PACKS_TARGET}x", "ok": same_ours / same_ref >= PACKS_TARGET},
    ]
    return {"bench": "clean", "mb": mb, "docs": len(corpus_texts), "kept": kept,
            "lid_chars": th.lid_chars, "lang_compared": compared,
            "lang_differ": len(differ), "lang_agreement": agree,
            "lang_differ_docs": differ[:20], "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=250, help="corpus size (default 250 MB)")
    p.add_argument("--lid-chars", type=int, default=None,
                   help="clean.py's --lid-chars for our side (default: clean.py's default)")
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(argv)
    from common import corpus_texts

    from pipeline.tables import table

    res = run(corpus_texts(a.mb, quick=a.quick), quick=a.quick, lid_chars=a.lid_chars)
    print(f"{res['mb']:.1f} MB, {res['docs']:,} documents; kept: reference "
          f"{res['kept']['reference']:,}, ours {res['kept']['ours']:,} "
          "(they differ: the reference's dup_lines counts blank lines); language decisions "
          f"differ on {res['lang_differ']:,} of {res['lang_compared']:,} documents")
    print(table(["implementation", "MB/s per core", "ratio", "target", "ok"],
                [[r["name"], round(r["mb_per_s_per_core"], 2),
                  "" if r["ratio"] is None else f"{r['ratio']:.2f}x",
                  r["target"] or "",
                  "" if r["ok"] is None else ("yes" if r["ok"] else "NO")] for r in res["rows"]]))
    return 0 if all(r["ok"] is not False for r in res["rows"]) else 1


if __name__ == "__main__":
    from pipeline.requirements import require

    require("bench/bench_clean.py", "requirements-bench.txt")
    sys.exit(main())
