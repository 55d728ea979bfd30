"""verify.py's items 5 to 7, what the stages before pack report: clean's stats table and
its rules' reach, the dedup stages' counts before and after, and the tokenizer's
compression (characters per token) on English and Chinese text.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

from algorithms.tokenizer_checks import LANG_NAMES, token_counts
from pipeline import layout
from pipeline.errors import StageError
from pipeline.manifest import display_path, read_manifest
from pipeline.tables import human_bytes, pct, table
from pipeline.verify.context import Context, Item, Missing

# Held-out text written for this check (in no data set), for the compression figures.
HELD_OUT = {
    "en": [
        "The committee met on Tuesday to review the budget for the new library. After a long "
        "discussion, members agreed to fund the children's reading room first and to look "
        "for private donors for the remaining work on the roof and the heating system.",
        "To replace a bicycle chain, shift to the smallest gear, open the quick link with "
        "pliers and pull the old chain out. Count the links, cut the new chain to the same "
        "length, thread it through the derailleur and close the link by pedalling gently.",
        "Rainfall in the valley was well below average this spring, so farmers planted "
        "drought-tolerant varieties and delayed irrigation until the soil moisture readings "
        "dropped below the thresholds recommended by the regional agricultural office.",
    ],
    "zh": [
        "周二下午，委员会开会审议新图书馆的预算。经过长时间讨论，委员们同意先拨款建设儿童阅览室，"
        "屋顶和供暖系统的剩余工程则另行寻找社会捐助。",
        "更换自行车链条时，先把变速挂到最小的齿轮，用钳子打开快扣，取下旧链条。数清链节，把新链条"
        "截成同样长度，穿过后拨，再轻轻踩动踏板，让快扣自动扣紧。",
        "今年春天山谷里的降雨明显少于往年，农民们改种了耐旱品种，并推迟灌溉，直到土壤湿度低于"
        "地区农业部门建议的数值。",
    ],
}
PUBLISHED_CPT = "GPT-2 4.34 / 0.49, Llama-2 3.81 / 0.70, cl100k 4.40 / 0.85 (English / Chinese)"


def check_clean_stats(ctx: Context) -> Item:
    it = Item(5, "cleaning stats table present, no rule removes more than "
                 f"{ctx.args.max_rule_removal:.0%}")
    p, m = ctx.stage_manifest("clean")
    counts = m.get("counts", {})
    reports = sorted((p.parent / "report").glob("*.md")) if (p.parent / "report").is_dir() else []
    if not reports:
        it.fail(f"no stats table in {p.parent / 'report'}", "rerun clean.py")
    else:
        it.figures.append(f"stats table: {display_path(reports[0])}")
    docs_in = counts.get("docs_in", 0)
    rows = []
    for rule, n in sorted((counts.get("removed") or {}).items(), key=lambda kv: -kv[1]):
        share = n / docs_in if docs_in else 0.0
        flag = share > ctx.args.max_rule_removal
        rows.append([rule, n, pct(n, docs_in), "FLAG" if flag else ""])
        if flag:
            it.fail(f"rule {rule!r} removed {pct(n, docs_in)} of the documents",
                    "a cleaning rule is wrong (check isalnum-style rules on Chinese text); "
                    "fix the threshold and rerun clean.py")
    it.details.append(table(["rule", "removed", "share", "flag"], rows or [["(none)", 0, "", ""]]))
    it.figures.append(f"clean: {docs_in:,} documents in, {counts.get('docs_out', 0):,} kept, "
                      f"{sum(1 for r in rows if r[1])} rules removed some")
    return it


def check_dedup_counts(ctx: Context) -> Item:
    it = Item(6, "document and byte counts before and after both dedup stages")
    rows = []
    for stage in ("dedup_exact", "dedup_minhash"):
        try:
            _, m = ctx.stage_manifest(stage)
        except Missing as e:
            it.fail(str(e), f"{stage} has not run; run {layout.STAGES[stage][0]}")
            continue
        c = m.get("counts", {})
        need = ("docs_in", "docs_out", "bytes_in", "bytes_out")
        if any(k not in c for k in need):
            it.fail(f"{stage} manifest lacks {', '.join(k for k in need if k not in c)}",
                    f"rerun {layout.STAGES[stage][0]}")
            continue
        rows.append([stage, c["docs_in"], c["docs_out"], pct(c["docs_in"] - c["docs_out"], c["docs_in"]),
                     human_bytes(c["bytes_in"]), human_bytes(c["bytes_out"])])
        it.figures.append(f"{stage}: {c['docs_in']:,} -> {c['docs_out']:,} documents, "
                          f"{human_bytes(c['bytes_in'])} -> {human_bytes(c['bytes_out'])}")
    if rows:
        it.details.append(table(["stage", "docs before", "docs after", "removed", "bytes before",
                                 "bytes after"], rows))
    return it


def script_of(text: str) -> str | None:
    """'zh' for mostly-Han text, 'en' for mostly-ASCII-letter text, else None."""
    letters = [ch for ch in text if ch.isalpha()]
    if not letters:
        return None
    han = sum(1 for ch in letters if "CJK" in unicodedata.name(ch, ""))
    ascii_ = sum(1 for ch in letters if ch.isascii())
    if han / len(letters) > 0.6:
        return "zh"
    if ascii_ / len(letters) > 0.9:
        return "en"
    return None


def tokenizer_heldout(tok_path: Path, max_chars: int = 2_000_000) -> dict[str, list[str]]:
    """The documents train_tokenizer.py kept out of its training sample, by language
    (its report/heldout.parquet; empty when there is none), up to max_chars each."""
    p = Path(tok_path).parent / "report" / "heldout.parquet"
    if not p.exists():
        return {}
    import pyarrow.parquet as pq

    t = pq.ParquetFile(p).read()
    if "lang" not in t.column_names or "text" not in t.column_names:
        return {}
    out: dict[str, list[str]] = {"en": [], "zh": []}
    size = {"en": 0, "zh": 0}
    for text, lang in zip(t.column("text").to_pylist(), t.column("lang").to_pylist()):
        if lang in out and text and size[lang] < max_chars:
            out[lang].append(text)
            size[lang] += len(text)
    return out


def tokenizer_sample_docs(tok_path: Path) -> dict[str, int]:
    """The English and Chinese documents of train_tokenizer.py's training sample (its
    manifest beside the tokenizer; none when it has none): the corpus has that language
    even when no document of it was held out (--heldout-bytes 0) or drawn for val."""
    p = Path(tok_path).parent / "manifest.json"
    try:
        m = read_manifest(p) if p.exists() else {}
    except StageError:
        return {}
    sample = m.get("sample") if m.get("stage") == "train_tokenizer" else None
    if not isinstance(sample, dict):
        return {}
    return {lang: n for lang in ("en", "zh")
            if isinstance(n := sample.get(f"{lang}_docs"), int) and n > 0}


def check_compression(ctx: Context) -> Item:
    it = Item(7, "compression measured: characters per token on English and Chinese")
    texts = {k: list(v) for k, v in HELD_OUT.items()}
    held = tokenizer_heldout(ctx.tokenizer_path)  # train_tokenizer.py's held-out documents
    sampled = tokenizer_sample_docs(ctx.tokenizer_path)
    for lang in texts:
        texts[lang] += held.get(lang, [])
    val = {"en": 0, "zh": 0}
    for t in ctx.corpus["val"].values():
        lang = script_of(t)
        if lang:
            texts[lang].append(t)
            val[lang] += 1
    mins = {"en": ctx.args.min_cpt_en, "zh": ctx.args.min_cpt_zh}
    vocab = ctx.tok.get_vocab_size(with_added_tokens=True)
    for lang in ("en", "zh"):
        chars = sum(len(t) for t in texts[lang])
        tokens = sum(token_counts(ctx.doc_tok, texts[lang]))
        cpt = chars / max(tokens, 1)
        # a corpus without this language (a Chinese-only one, say): the fixed paragraphs
        # still give a figure, but no minimum holds for a language it never meant to have.
        # Held out and val documents show the language; with none of them (nothing held
        # out, a few val documents) the tokenizer's training sample still can
        measured = len(held.get(lang, [])) + val[lang]
        trained = 0 if measured else sampled.get(lang, 0)
        in_corpus = measured + trained
        it.figures.append(f"{lang}: {cpt:.2f} characters per token ({chars:,} characters, "
                          f"{tokens:,} tokens; {len(HELD_OUT[lang])} held-out paragraphs, "
                          f"{len(held.get(lang, []))} documents held out by train_tokenizer.py, "
                          f"{val[lang]} val documents; "
                          + (f"{trained:,} documents in the tokenizer's training sample; "
                             if trained else "")
                          + (f"minimum {mins[lang]})" if in_corpus else
                             f"no {LANG_NAMES[lang]} document in the corpus: not held to the "
                             f"minimum {mins[lang]})"))
        if cpt < mins[lang] and in_corpus:
            it.fail(f"{lang} compression {cpt:.2f} < {mins[lang]}",
                    f"too little {LANG_NAMES[lang]} in the tokenizer's training corpus "
                    + ("(each Chinese character takes several tokens)" if lang == "zh" else
                       "(English words are cut into many short tokens)")
                    + f", or a vocabulary too small for it ({vocab:,} tokens); rebalance, or "
                      "raise --vocab-size, and rerun train_tokenizer.py")
    it.details.append(f"published, for comparison: {PUBLISHED_CPT}")
    return it
