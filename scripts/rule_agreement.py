#!/usr/bin/env python3
"""Do algorithms/quality_signals' rules decide as datatrove's filters do?

    python scripts/rule_agreement.py data/bench_corpus            # first 250 MB
    python scripts/rule_agreement.py data/bench_corpus --mb 50 --examples 5

Reads the first --mb MB of text of the corpus (part-*.parquet in name order, columns
text and lang). On the English documents (lang == "en") it runs, for every pack, datatrove
0.10.1's own filter with the published defaults (bench/datatrove_packs.py) and the
decision from our signals (algorithms/quality_signals_fast) and algorithms/rule_packs.py's
thresholds, and prints per pack and per rule the documents, the agreement, and every
disagreement by class with a few examples. A rule's line compares "datatrove's first
failing check is this rule" with "our first failing rule is this rule" (in datatrove's
order; C4's lorem ipsum and curly bracket counted as one, datatrove reports whichever
line comes first). On the Chinese documents (lang == "zh") it prints the share each
rule meant for Chinese would remove.

Disagreement classes:
  "CJK characters"            the text has CJK characters, where our words (one per
                              character) are deliberately not spaCy's;
  "tokens differ from spaCy's" our words differ from datatrove's spaCy tokens (a
                              tokenizer corner our rewrite does not cover);
  "other"                     neither: a signal defined differently (none is expected).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from algorithms import quality_signals as Q  # noqa: E402
from algorithms import rule_packs  # noqa: E402
from datatrove_packs import datatrove_verdict  # noqa: E402

REASONS = {
    "empty": None, "line_punct_ratio": "fineweb_line_punct",
    "short_line_ratio": "fineweb_short_lines", "char_dup_ratio": "fineweb_dup_line_chars",
    "list_ratio": "fineweb_newline_words",
    "gopher_short_doc": "gopher_min_words", "gopher_long_doc": "gopher_max_words",
    "gopher_below_avg_threshold": "gopher_min_mean_word_length",
    "gopher_above_avg_threshold": "gopher_max_mean_word_length",
    "gopher_too_many_hashes": "gopher_hash_ratio",
    "gopher_too_many_ellipsis": "gopher_ellipsis_ratio",
    "gopher_too_many_bullets": "gopher_bullet_lines",
    "gopher_too_many_end_ellipsis": "gopher_ellipsis_lines",
    "gopher_below_alpha_threshold": "gopher_alpha_words",
    "gopher_enough_stop_words": "gopher_stop_words",
    "dup_para_frac": "gopher_dup_paragraphs", "dup_para_char_frac": "gopher_dup_paragraph_chars",
    "dup_line_frac": "gopher_dup_lines", "dup_line_char_frac": "gopher_dup_line_chars",
    **{f"top_{n}_gram": f"gopher_top_{n}gram" for n in (2, 3, 4)},
    **{f"duplicated_{n}_n_grams": f"gopher_dup_{n}gram" for n in range(5, 11)},
    "lorem_ipsum": "c4_lorem_or_curly", "curly_bracket": "c4_lorem_or_curly",
    "too_few_sentences": "c4_min_sentences",
}
EMPTY = {"fineweb": "fineweb_line_punct", "gopher_repetition": "gopher_rep_empty"}


def tutorial_keeps(text: str) -> bool:
    """clean.py's four cheap rules with the tutorial's thresholds (language ID aside)."""
    from algorithms import cleaning
    return (len(text) >= 200 and cleaning.dup_line_share(text) <= 0.30
            and cleaning.longest_char_run(text) <= 50 and cleaning.alnum_share(text) >= 0.50)


def disagreement_class(text: str) -> str:
    if any(map(Q.is_cjk, text)):
        return "CJK characters"
    from datatrove.utils.text import split_into_words
    if list(Q.words(text)) != split_into_words(text, "eng"):
        return "tokens differ from spaCy's"
    return "other"


def first_rules(pack: str, values: dict, lang: str = "en") -> list[str | None]:
    """Per document, the first of the pack's rules (in datatrove's order) that removes it."""
    rules = [r for r in rule_packs.PACKS[pack] if not r.skips(lang)]
    n = len(next(iter(values.values())))
    out = [None] * n
    for r in reversed(rules):
        name = "c4_lorem_or_curly" if r.name in ("c4_lorem_ipsum", "c4_curly_bracket") \
            else r.name
        for i, v in enumerate(values[r.signal.split(".", 1)[1]]):
            if r.removed(v, r.threshold):
                out[i] = name
    return out


def agreement(pack: str, texts: list[str], values: dict, examples: int = 3) -> dict:
    """Compare datatrove's filter with our decision on texts (values: our signals)."""
    ours = first_rules(pack, values)
    classes, shown, per_rule = Counter(), {}, Counter()
    agree = 0
    for i, t in enumerate(texts):
        kept, why = datatrove_verdict(pack, t)
        theirs = None if kept else (REASONS.get(why) or EMPTY.get(pack, why))
        if (theirs is None) == (ours[i] is None):
            agree += 1
        else:
            c = disagreement_class(t)
            classes[c] += 1
            shown.setdefault(c, [])
            if len(shown[c]) < examples:
                shown[c].append((theirs, ours[i], t[:160].replace("\n", " | ")))
        for name in {theirs, ours[i]} - {None}:
            per_rule[name, theirs == ours[i]] += 1
    rules = sorted({name for name, _ in per_rule})
    return {"docs": len(texts), "agreement": agree / len(texts) if texts else 1.0,
            "classes": classes, "examples": shown,
            "rules": {r: (per_rule[r, True], per_rule[r, False]) for r in rules}}


def read_corpus(path: Path, mb: float) -> tuple[list[str], list[str]]:
    parts = sorted(path.glob("part-*.parquet"))
    if not parts:
        raise SystemExit(f"no part-*.parquet in {path}")
    texts, langs, total = [], [], 0
    limit = mb * 1e6
    for p in parts:
        t = pq.read_table(p, columns=["text", "lang"])
        for text, lang in zip(t.column("text").to_pylist(), t.column("lang").to_pylist()):
            if total >= limit:
                return texts, langs
            texts.append(text or "")
            langs.append(lang)
            total += len((text or "").encode())
    return texts, langs


def main() -> int:
    from algorithms.quality_signals_fast import measure
    from pipeline.requirements import require

    # datatrove's English word tokenizer is spaCy's
    require("scripts/rule_agreement.py", "requirements-bench.txt", ["spacy"])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path, help="folder with part-*.parquet (text, lang)")
    ap.add_argument("--mb", type=float, default=250, help="first MB of text to read")
    ap.add_argument("--examples", type=int, default=3)
    ap.add_argument("--packs", default=",".join(Q.PACKS), help="comma-separated packs")
    a = ap.parse_args()
    texts, langs = read_corpus(a.corpus, a.mb)
    en = [t for t, lang in zip(texts, langs) if lang == "en"]
    zh = [t for t, lang in zip(texts, langs) if lang == "zh"]
    print(f"{len(texts)} documents in the first {a.mb:g} MB: {len(en)} English, {len(zh)} Chinese")
    ok = True
    packs = a.packs.split(",")
    for pack in packs:
        t0 = time.time()
        res = agreement(pack, en, measure(pack, pa.array(en, pa.string())), a.examples)
        ok &= res["agreement"] >= 0.99
        print(f"\n== {pack}: {res['docs']} English documents, agreement "
              f"{res['agreement']:.3%} ({time.time() - t0:.0f} s)")
        for r, (same, diff) in res["rules"].items():
            print(f"   {r:<30} removed by either: {same + diff:>6}   "
                  f"same first rule: {same:>6}   differ: {diff}")
        for c, k in res["classes"].most_common():
            print(f"   disagreements, {c}: {k}")
            for theirs, ours, text in res["examples"][c]:
                print(f"      datatrove {theirs} / ours {ours}: {text!r}")
    if zh:
        print(f"\n== Chinese: share of the {len(zh)} documents each rule would remove")
        col = pa.array(zh, pa.string())
        for pack in packs:
            values = measure(pack, col)
            any_ = np.zeros(len(zh), bool)
            for r in rule_packs.PACKS[pack]:
                if not r.skips("zh"):
                    hit = np.asarray(r.removed(values[r.signal.split(".", 1)[1]], r.threshold))
                    any_ |= hit
                    print(f"   {r.name:<30} {hit.mean():7.2%}")
            print(f"   {pack + ' (any rule)':<30} {any_.mean():7.2%}")
    print("\nagreement >= 99% on every pack" if ok else "\nagreement BELOW 99% on some pack")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
