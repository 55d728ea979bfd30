"""Section 6 of the tutorial: the acceptance checklist, run against data/.

    python verify.py                     # checks data/, writes data/verify_report.md
    python verify.py --data-dir /big/data --windows 20

Each of the ten items prints PASS or FAIL with its figures; the report is also written
as Markdown; the exit status is 1 if any item fails, 2 for bad arguments or when verify.py
cannot write its own files (its work folder, the report: a full disk, a size limit, a
read-only folder), which is one line and keeps the previous report. A FAIL names
its likely cause and the stage to rerun, as the table in section 7 does:

   1  train.bin / val.bin exist, size = 2 bytes x manifest tokens, and the token count is
      within --size-tolerance of the estimate (input bytes / bytes per token on a sample,
      5.6, without its 5% headroom for preallocation)
   2  N random windows decode to readable text (replacement characters and byte-level
      artefacts below --max-bad-char-rate)
   3  the tokenizer round trip is lossless on English, Chinese and emoji
   4  EOS count in each .bin = documents packed into it; EOS density reported
   5  the cleaning stats table is present; a rule removing > 30% is flagged
   6  document and byte counts before and after both dedup stages
   7  compression (characters per token) on English and Chinese text: fixed paragraphs,
      the documents train_tokenizer.py held out, and the val documents
   8  no validation document in train: exact (normalised hash) and near-duplicate
      (MinHash signatures of dedup_minhash.py, Jaccard >= 0.8)
   9  the same pipeline ran end to end on the smoke data set (sample or TinyStories)
  10  nothing lost: the manifests chain from raw to packed and every count adds up

The .bin files are read in memmap chunks (--chunk-tokens), so they may exceed RAM.
A check whose stage has not run yet fails with the stage to run.
"""

from __future__ import annotations

import pipeline  # noqa: F401  (first, before numpy: see pipeline/__init__.py)

import argparse
import os
import shutil
import unicodedata
from functools import partial
from pathlib import Path

import numpy as np
import xxhash

from pipeline import layout
from pipeline.disk import check_out_path, check_report_path
from pipeline.errors import ArgumentParser, StageError, refusal, run_stage
from pipeline.executors import add_executor_args, check_executor
from pipeline.local_pool import start_pool_early
from pipeline.lock import FolderLock, lock_all
from pipeline.manifest import check_input, display_path, read_manifest, source_name
from pipeline.tables import human_bytes, pct, table, window_text
from pipeline.shards import file_digest, matches_record
from pipeline.verify_context import PACK_MANIFEST, Context, Item, Missing
from pipeline.verify_report import (REPORT_HEAD, manifest_fingerprints, own_write_failed,
                                    render_markdown, render_terminal, report_path, write_failed,
                                    write_report)
from pipeline.verify_scan import SCAN
from algorithms.tokenizer_checks import LANG_NAMES, token_counts
from algorithms.tokenizer_file import (EOS_TOKEN, SPECIAL_TOKENS, UINT16_LIMIT, max_token_id)

SMOKE_DATASETS = ("sample", "tinystories")
REPLACEMENT = "\ufffd"
# how a decoded window shows the characters a terminal or a Markdown file would act on
SHOWN = {**{c: chr(0x2400 + c) for c in range(32)}, 0x7F: "\u2421", 0x0A: "⏎ ", 0x0D: "␍"}


def shown(text: str) -> str:
    """A decoded window for the terminal and verify_report.md: newlines as ⏎, the other
    control characters (escape sequences, NUL, carriage returns) as their visible
    symbols, so a document's bytes cannot move the cursor or run together."""
    return text.translate(SHOWN)


BYTE_LEVEL_ARTEFACTS = set("ĠĊĉ")  # what ByteLevel-mapped text shows without its decoder

ROUND_TRIP = ["Hello world", "机器学习模型训练", "emoji 😀 测试", "a" * 200,
              "Mixed 中文 and English, 标点符号！ 👍🏽 family 👨‍👩‍👧 flags 🇨🇳🇬🇧",
              "tabs\tand\nnewlines\r\n  double  spaces   ", "literal <|endoftext|> in text"]

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


# --------------------------------------------------------------------------------------
# Helpers of the items. What they share (Item, Context) is pipeline/verify_context.py;
# the parallel scan of the packed input, pipeline/verify_scan.py.
# --------------------------------------------------------------------------------------


def split_rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, xxhash.xxh32_intdigest(name.encode())])


def count_token(path: Path, token: int, chunk: int) -> tuple[int, int, int | None]:
    """(tokens, occurrences of `token`, last token) of a .bin, read in memmap chunks."""
    size = path.stat().st_size
    n = size // 2
    if n == 0:
        return 0, 0, None
    data = np.memmap(path, dtype=np.uint16, mode="r")
    hits = 0
    for start in range(0, n, chunk):
        hits += int(np.count_nonzero(data[start:start + chunk] == token))
    last = int(data[n - 1])
    del data
    return n, hits, last


# --------------------------------------------------------------------------------------
# The ten items.
# --------------------------------------------------------------------------------------

def check_files(ctx: Context) -> Item:
    it = Item(1, "train.bin and val.bin exist, match the manifest (size and digest) and the "
                 "estimate")
    c = ctx.pack_counts
    for s in ("train", "val"):
        p = ctx.data / f"{s}.bin"
        if not p.exists():
            it.fail(f"{p} missing", "pack_parallel.py did not finish; rerun pack_parallel.py")
            continue
        want = 2 * c[s]["tokens"]
        size = p.stat().st_size
        it.figures.append(f"{s}.bin: {size:,} bytes = 2 x {c[s]['tokens']:,} tokens"
                          if size == want else f"{s}.bin: {size:,} bytes")
        if size != want:
            it.fail(f"{s}.bin is {size:,} bytes, manifest says 2 x {c[s]['tokens']:,} = {want:,}",
                    "the .bin was changed or truncated after packing; rerun pack_parallel.py")
    # the bytes, not only the sizes: a token changed in place keeps the size
    for rec in ctx.pack.get("files", []):
        p = ctx.data / rec["name"]
        if p.is_file() and p.stat().st_size == rec["size"] and not matches_record(p, rec):
            it.fail(f"{p} does not match its xxh3-128 digest in {PACK_MANIFEST}",
                    "it was changed after packing; rerun pack_parallel.py")
    h = file_digest(ctx.tokenizer_path)
    if h != c["tokenizer"]["xxh3_128"]:
        it.fail(f"{ctx.tokenizer_path} changed since packing (hash {h[:12]} vs "
                f"{c['tokenizer']['xxh3_128'][:12]})",
                "the tokenizer was retrained after packing; rerun pack_parallel.py")
    # 5.6: estimate = input bytes / (bytes per token on a 1% sample, at most ~20 MB, EOS
    # included: a larger sample changes the estimate by far less than the tolerance).
    # Without 5.6's "* 1.05": that 5% is headroom for preallocating a memmap, and here the
    # estimate is compared with the count packed (with it, a right count reads -4.8%).
    sample = ctx.corpus["sample"] or list(ctx.corpus["val"].values())
    s_bytes = sum(len(t.encode("utf-8")) for t in sample)
    s_tokens = sum(token_counts(ctx.doc_tok, sample)) + len(sample)   # + an EOS each
    bpt = s_bytes / s_tokens
    est = c["bytes_out"] / bpt
    tokens = c["train"]["tokens"] + c["val"]["tokens"]
    dev = tokens / est - 1
    it.figures.append(f"estimate {est:,.0f} tokens ({human_bytes(c['bytes_out'])} / {bpt:.3f} "
                      f"bytes per token on a {len(sample):,}-document sample, 5.6); packed "
                      f"{tokens:,} ({dev:+.1%}, tolerance ±{ctx.args.size_tolerance:.0%})")
    if abs(dev) > ctx.args.size_tolerance:
        it.fail(f"token count is {dev:+.1%} off the estimate",
                "documents were lost or duplicated while packing, or the input changed; "
                "rerun pack_parallel.py")
    return it


def bad_chars(text: str) -> tuple[int, int]:
    """(replacement characters, byte-level artefacts) in a decoded window. A window's
    ends may cut a multi-byte character, so replacement characters there do not count."""
    core = text.strip(REPLACEMENT)
    return core.count(REPLACEMENT), sum(1 for ch in core if ch in BYTE_LEVEL_ARTEFACTS)


def check_windows(ctx: Context) -> Item:
    it = Item(2, f"{ctx.args.windows} random windows decode to readable text")
    p = ctx.data / "train.bin"
    if not p.is_file():
        it.fail(f"{p} missing", "pack_parallel.py has not run here, or did not finish; run it")
        return it
    data = np.memmap(p, dtype=np.uint16, mode="r")
    n, w = len(data), ctx.args.window_tokens
    if n <= w:
        it.fail(f"{p} holds {n} tokens, fewer than one window", "rerun pack_parallel.py")
        return it
    rng = split_rng(ctx.args.seed, "windows")
    chars = repl = art = 0
    for k, start in enumerate(sorted(rng.integers(0, n - w, size=ctx.args.windows))):
        text = ctx.tok.decode([int(x) for x in data[start:start + w]], skip_special_tokens=False)
        it.data.setdefault("windows", []).append({"start": int(start), "end": int(start + w),
                                                  "text": text})
        r, a = bad_chars(text)
        chars, repl, art = chars + len(text), repl + r, art + a
        it.details.append(f"[{k}] tokens {start:,}..{start + w:,}: "
                          + shown(window_text(text))[:400])
    rate_r, rate_a = repl / max(chars, 1), art / max(chars, 1)
    it.figures.append(f"{chars:,} characters decoded: {repl} replacement characters "
                      f"({rate_r:.3%}), {art} byte-level artefacts 'Ġ/Ċ' ({rate_a:.3%}); "
                      f"limit {ctx.args.max_bad_char_rate:.2%}")
    if rate_r > ctx.args.max_bad_char_rate or rate_a > ctx.args.max_bad_char_rate:
        it.fail("the decoded windows are garbled",
                "pre_tokenizer and decoder not paired (both must be ByteLevel); fix "
                "train_tokenizer.py, rerun it and pack_parallel.py")
    return it


def check_round_trip(ctx: Context) -> Item:
    it = Item(3, "tokenizer round trip is lossless on English, Chinese and emoji")
    tok = ctx.tok
    rows = []
    for s in ROUND_TRIP:
        ids = ctx.doc_tok.encode(s, add_special_tokens=False).ids
        back = tok.decode(ids, skip_special_tokens=False)
        rows.append([s[:40].replace("\r", "␍").replace("\n", "⏎").replace("\t", "⇥"), len(s), len(ids),
                     "yes" if back == s else "NO"])
        if back != s:
            it.fail(f"{s[:30]!r} decodes as {back[:30]!r}",
                    "pre_tokenizer and decoder not paired, or initial_alphabet misses bytes; "
                    "fix and rerun train_tokenizer.py")
    it.details.append(table(["text", "chars", "tokens", "lossless"], rows))
    top = max_token_id(tok)
    it.figures.append(f"{sum(r[3] == 'yes' for r in rows)}/{len(rows)} strings lossless; "
                      f"vocabulary {tok.get_vocab_size():,}, largest id {top:,}")
    if top >= UINT16_LIMIT:
        it.fail(f"largest id {top:,} does not fit uint16", "vocabulary too large; rerun "
                "train_tokenizer.py with --vocab-size below 65,536")
    missing = [t for t in SPECIAL_TOKENS if tok.token_to_id(t) is None]
    it.figures.append(f"special tokens: {EOS_TOKEN}={tok.token_to_id(EOS_TOKEN)}, "
                      f"{len(SPECIAL_TOKENS) - len(missing)}/{len(SPECIAL_TOKENS)} present")
    if missing:
        it.fail(f"special tokens missing: {', '.join(missing)}",
                "the tokenizer was trained without SPECIAL_TOKENS; rerun train_tokenizer.py")
    return it


def check_eos(ctx: Context) -> Item:
    it = Item(4, "EOS count in each .bin equals the documents packed into it")
    c = ctx.pack_counts
    for s in ("train", "val"):
        p = ctx.data / f"{s}.bin"
        n, hits, last = count_token(p, ctx.eos, ctx.args.chunk_tokens)
        docs = c[s]["docs"]
        dens = hits / n if n else 0.0
        it.figures.append(f"{s}.bin: {hits:,} EOS for {docs:,} documents in {n:,} tokens; "
                          f"density {dens:.5f} per token = 1 / {n / max(hits, 1):,.1f} "
                          f"(average document {n / max(docs, 1):,.1f} tokens)")
        if hits != docs:
            it.fail(f"{s}.bin has {hits:,} EOS for {docs:,} documents",
                    "packer: EOS not appended exactly once per document, or a literal "
                    f"{EOS_TOKEN} in the text became the special token; rerun pack_parallel.py")
        if docs and last != ctx.eos:
            it.fail(f"{s}.bin does not end with EOS", "packer truncated the last document; "
                    "rerun pack_parallel.py")
    return it


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


def val_candidates(scan: dict, vband: np.ndarray) -> list[tuple[int, int]]:
    """(train global index, val index) pairs that share a band hash: every pair LSH would
    compare, found unit by unit with numpy over the scan's band files (each read once)."""
    work, units = scan["work"], scan["units"]
    where: list[dict[int, list[int]]] = [{} for _ in range(vband.shape[0])]
    for j in range(vband.shape[0]):
        for k, h in enumerate(vband[j]):
            where[j].setdefault(int(h), []).append(k)
    keys = [np.array(sorted(w), dtype=np.uint64) for w in where]
    pairs = set()
    for r in range(len(units)):
        tb = np.load(work / "band" / f"{r:05d}.npy")
        train = np.load(work / "train" / f"{r:05d}.npy")
        for j in range(vband.shape[0]):
            for d in np.flatnonzero(np.isin(tb[j], keys[j]) & train):
                for k in where[j][int(tb[j, d])]:
                    pairs.add((int(scan["offsets"][r] + d), k))
    return sorted(pairs)


def check_val_overlap(ctx: Context) -> Item:
    """Item 8. Every val document is compared, through LSH bands, with every train document
    (the scan's band hashes, all cores); the candidate pairs get their MinHash similarity,
    and an exact comparison of normalised texts. Identical normalised texts have identical
    signatures, so an exact copy is always a candidate: the exact check misses nothing."""
    from algorithms import minhash
    from algorithms.exact_dedup import normalise  # the one normalisation (section 3.2)
    from pipeline.units import fetch_rows

    it = Item(8, "no validation document is in train")
    scan = ctx.corpus
    val = scan["val"]
    c = ctx.pack_counts
    if len(val) != c["val"]["docs"]:
        it.fail(f"{len(val)} val ids found in the input, manifest says {c['val']['docs']}",
                "val_ids.txt and val.bin disagree; rerun pack_parallel.py")
    cfg = scan["minhash"]
    hasher = minhash.MinHasher(num_perm=cfg["num_perm"], ngram=cfg["ngram"], seed=cfg["seed"])
    vids = list(val)
    vsig = hasher.signatures([val[i] for i in vids])
    cands = val_candidates(scan, minhash.band_hashes(vsig, cfg["bands"], cfg["rows"]))
    exact, near, best = [], [], 0.0
    if cands:
        gidx = np.array([g for g, _ in cands])
        texts = fetch_rows(scan["units"], scan["offsets"], gidx, "text")
        sims = minhash.similarity(hasher.signatures(texts), vsig[[k for _, k in cands]])
        best = float(sims.max())
        for (g, k), t, sim in zip(cands, texts, sims):
            if sim >= 1.0 and normalise(t) == normalise(val[vids[k]]):
                exact.append(vids[k])
            elif sim >= ctx.args.near_dup_threshold:
                near.append((vids[k], float(sim)))
    it.figures.append(f"exact: {len(val):,} val documents against {scan['docs'] - len(val):,} "
                      f"train documents (normalised text): {len(exact)} in train")
    if exact:
        it.fail(f"val documents also in train: {', '.join(sorted(set(exact))[:5])}",
                "val/train overlap: the split was done on tokens, not documents, or exact "
                "dedup missed copies; rerun dedup_exact.py, then pack_parallel.py")
    it.figures.append(f"near-duplicate: MinHash candidates from LSH bands, Jaccard >= "
                      f"{ctx.args.near_dup_threshold}: {len(near)} pairs ({len(cands)} "
                      f"candidate pairs compared, highest similarity {best:.2f})")
    it.figures.append(f"train band hashes: dedup_minhash.py's kept ones for {scan['bands_kept']} "
                      f"of {len(scan['units'])} units, the rest computed here"
                      + ("" if scan["bands_kept"] else f" ({scan['band_note']})"))
    if near:
        it.fail(f"val documents with near-duplicates in train: "
                f"{', '.join(f'{i} ({s:.2f})' for i, s in near[:5])}",
                "val/train overlap: near-duplicates survived; rerun dedup_minhash.py, "
                "then pack_parallel.py")
    return it


def check_smoke_run(ctx: Context) -> Item:
    it = Item(9, "the pipeline ran end to end on the smoke data set")
    root = Path(ctx.args.smoke_dir) if ctx.args.smoke_dir else ctx.data
    sub = ctx if root == ctx.data else Context(argparse.Namespace(**{**vars(ctx.args),
                                                                     "data_dir": str(root)}))
    chain = sub.chain
    stages = [m.get("stage") for _, m in reversed(chain)]
    raw = chain[-1][1]
    dataset = (raw.get("config") or {}).get("dataset")
    what = source_name(raw.get("config") or {})
    it.figures.append(f"{root}: " + " -> ".join(stages) + f" (dataset: {what})")
    missing = [s for s in ("download_data", "clean", "dedup_exact", "dedup_minhash",
                           "pack_parallel") if s not in stages]
    if missing:
        it.fail(f"stages missing from the chain: {', '.join(missing)}",
                f"run {layout.STAGES[missing[0]][0]} and the stages after it (make demo)")
    tok_in = (sub.pack.get("extra_inputs") or {}).get("tokenizer")
    if not tok_in:
        it.fail("pack_manifest.json records no train_tokenizer manifest",
                "the tokenizer was not made by train_tokenizer.py; run it, then pack_parallel.py")
    else:
        it.figures.append(f"tokenizer from train_tokenizer.py ({tok_in['manifest']})")
        try:   # the tokenizer is part of the chain too: retrained since, pack is stale
            now = read_manifest(root / tok_in["manifest"]).get("output_fingerprint")
        except StageError as e:
            now = None
            it.fail(str(e), "run train_tokenizer.py, then pack_parallel.py")
        if now is not None and now != tok_in.get("fingerprint"):
            it.fail(f"{root / tok_in['manifest']} changed after pack_parallel.py read it",
                    "the tokenizer was retrained after packing; rerun pack_parallel.py")
    if dataset not in SMOKE_DATASETS:
        it.fail(f"{root} was built from {what}, not a smoke data set",
                "run the pipeline on the sample (make demo) and pass its folder as --smoke-dir")
    try:
        check_input(root / PACK_MANIFEST)
        if it.ok:
            it.figures.append("every manifest in the chain is fresh (fingerprints match)")
    except StageError as e:
        it.fail(str(e), "a stage was rerun without the stages after it")
    return it


def check_nothing_lost(ctx: Context) -> Item:
    it = Item(10, "nothing lost: manifests chain from raw to packed and the counts add up")
    chain = list(reversed(ctx.chain))  # raw first
    if chain[0][1].get("stage") != "download_data":
        it.fail(f"the chain starts at {chain[0][0]}, not at a download_data manifest",
                "rerun the pipeline from download_data.py")
    prev_docs = prev_bytes = None
    rows = []
    for p, m in chain:
        stage, c = m.get("stage"), m.get("counts") or {}
        script = m.get("script", f"{stage}.py")
        if stage == "download_data":
            docs_out, bytes_out = c.get("rows"), c.get("text_bytes")
            rows.append([stage, "", docs_out, "", ""])
        else:
            need = [k for k in ("docs_in", "docs_out", "removed") if k not in c]
            if need:
                it.fail(f"{stage} manifest lacks {', '.join(need)}", f"rerun {script}")
                break
            removed = sum((c.get("removed") or {}).values())
            docs_out, bytes_out = c["docs_out"], c.get("bytes_out")
            rows.append([stage, c["docs_in"], docs_out, removed,
                         ", ".join(f"{k} {v:,}" for k, v in (c.get("removed") or {}).items())])
            if c["docs_in"] != docs_out + removed:
                it.fail(f"{stage}: {c['docs_in']:,} in != {docs_out:,} kept + {removed:,} removed",
                        f"{script} dropped documents without counting them; fix and rerun it")
            if prev_docs is not None and c["docs_in"] != prev_docs:
                it.fail(f"{stage} read {c['docs_in']:,} documents, the stage before wrote "
                        f"{prev_docs:,}", f"rerun {script}")
            if prev_bytes is not None and c.get("bytes_in") not in (None, prev_bytes):
                it.fail(f"{stage} read {c['bytes_in']:,} bytes, the stage before wrote "
                        f"{prev_bytes:,}", f"rerun {script}")
        prev_docs, prev_bytes = docs_out, bytes_out
    it.details.append(table(["stage", "docs in", "docs out", "removed", "by reason"], rows))
    pc = ctx.pack_counts
    packed = pc["train"]["docs"] + pc["val"]["docs"]
    it.figures.append(" -> ".join(f"{r[0]} {r[2]:,}" for r in rows if isinstance(r[2], int))
                      + f"; packed {packed:,} documents ({pc['train']['docs']:,} train + "
                      f"{pc['val']['docs']:,} val)")
    if packed != pc["docs_out"]:
        it.fail(f"train + val documents {packed:,} != pack docs_out {pc['docs_out']:,}",
                "packer lost documents; rerun pack_parallel.py")
    return it


CHECKS = [check_files, check_windows, check_round_trip, check_eos, check_clean_stats,
          check_dedup_counts, check_compression, check_val_overlap, check_smoke_run,
          check_nothing_lost]
TITLES = {1: "train.bin / val.bin sizes", 2: "decoded windows", 3: "tokenizer round trip",
          4: "EOS count", 5: "cleaning stats", 6: "dedup counts", 7: "compression",
          8: "val not in train", 9: "smoke run", 10: "nothing lost"}


def run_check(fn, num: int, ctx: Context) -> Item:
    """Run one item; a missing prerequisite is a FAIL that names the stage to run. A write
    of verify.py's own that fails stops the run instead (write_failed): the checklist
    cannot be finished, and FAILs would blame the data and replace a good report."""
    try:
        try:
            return fn(ctx)
        except ValueError as e:   # an algorithm's refusal (a tokenizer file that is not one)
            bad = refusal(e)
            if bad is None:
                raise
            raise bad from None
    except (Missing, StageError) as e:
        it = Item(num, TITLES[num])
        it.fail(str(e), f"a prerequisite is missing: {str(e).split(': ')[-1]}")
        return it
    except Exception as e:  # a broken input must not hide the other nine items
        if own_write_failed(e, ctx):
            where = ctx.data / SCAN   # a worker's write names no file
            if isinstance(e.filename, (str, bytes)):
                where = Path(os.fsdecode(e.filename))
            raise write_failed(e, where, report_path(ctx)) from None
        it = Item(num, TITLES[num])
        it.fail(f"{type(e).__name__}: {e}", "unexpected input; see the message")
        return it


# --------------------------------------------------------------------------------------
# The command line (the report it writes: pipeline/verify_report.py).
# --------------------------------------------------------------------------------------


def parse_args(argv):
    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", "--input", dest="data_dir", default=str(layout.DATA),
                   help="the data folder it checks (default: data)")
    p.add_argument("--tokenizer", default=None,
                   help="default: the tokenizer recorded in pack_manifest.json")
    p.add_argument("--report", "--output", dest="report", default=None,
                   help="where the report goes (default: DATA_DIR/verify_report.md, and .json beside it)")
    p.add_argument("--windows", type=int, default=10, help="random windows to decode (default 10)")
    p.add_argument("--window-tokens", type=int, default=200,
                   help="tokens per window (default 200, as section 6 decodes)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random windows")
    p.add_argument("--size-tolerance", type=float, default=0.10,
                   help="allowed deviation of packed tokens from the estimate (default 0.10)")
    p.add_argument("--max-bad-char-rate", type=float, default=0.005,
                   help="replacement characters / artefacts allowed in decoded windows (0.005)")
    p.add_argument("--max-rule-removal", type=float, default=0.30,
                   help="flag a cleaning rule that removes more than this share (0.30)")
    p.add_argument("--min-cpt-en", type=float, default=2.0,
                   help="minimum English characters per token (default 2.0)")
    p.add_argument("--min-cpt-zh", type=float, default=0.6,
                   help="minimum Chinese characters per token (default 0.6)")
    p.add_argument("--near-dup-threshold", type=float, default=0.8,
                   help="MinHash similarity from which a train document counts as a near "
                        "copy of a val one (item 8; default 0.8, dedup_minhash's)")
    p.add_argument("--smoke-dir", default=None,
                   help="data folder of the smoke run, if DATA_DIR holds the full run")
    p.add_argument("--chunk-tokens", type=int, default=1 << 24,
                   help="tokens read per memmap chunk (default 16M)")
    add_executor_args(p)
    a = p.parse_args(argv)
    for flag, v, low in (("--windows", a.windows, 1), ("--window-tokens", a.window_tokens, 2),
                         ("--chunk-tokens", a.chunk_tokens, 1)):
        if v < low:
            raise StageError(f"{flag} {v}: must be at least {low}")
    if a.workers < 1 or not 0 < a.task_mb < float("inf"):   # NaN is not above 0
        raise StageError(f"--workers {a.workers} / --task-mb {a.task_mb}: --workers must be "
                         "at least 1 and --task-mb positive")
    check_executor(a)
    if not 0 <= a.seed < 2 ** 64:
        raise StageError(f"--seed {a.seed}: must be between 0 and 2**64-1")
    for flag, v, hi in (("--size-tolerance", a.size_tolerance, None),
                        ("--max-bad-char-rate", a.max_bad_char_rate, 1),
                        ("--max-rule-removal", a.max_rule_removal, 1),
                        ("--min-cpt-en", a.min_cpt_en, None), ("--min-cpt-zh", a.min_cpt_zh, None),
                        ("--near-dup-threshold", a.near_dup_threshold, 1)):
        if not (0 <= v < float("inf") and (hi is None or v <= hi)):   # NaN fails both
            raise StageError(f"{flag} {v}: must be " + (f"between 0 and {hi}" if hi else ">= 0"))
    if a.report is not None:   # a .md, and the .json beside it: neither may be another file
        check_out_path("--output", a.report, folder=False)   # nor a file where a folder goes
        check_report_path(Path(a.report), "--output", ".md", REPORT_HEAD)
        check_report_path(Path(a.report).with_suffix(".json"), "--output (its .json)", ".json",
                          '"items"')
        Path(a.report).parent.mkdir(parents=True, exist_ok=True)
    if not Path(a.data_dir).is_dir():
        raise StageError(f"--data-dir {a.data_dir} is not a folder; run the pipeline first "
                         "(make demo)")
    # a wrong path of the user's is theirs to fix, not a FAIL of the data
    if a.tokenizer is not None and not Path(a.tokenizer).is_file():
        raise StageError(f"--tokenizer {a.tokenizer}: no such file (give the tokenizer.json "
                         "pack_parallel.py used)")
    if a.smoke_dir is not None and not Path(a.smoke_dir).is_dir():
        raise StageError(f"--smoke-dir {a.smoke_dir} is not a folder")
    return a


def main(argv: list[str] | None = None) -> int:
    import time

    from pipeline.progress import cpu_seconds, peak_rss_mb

    t0 = time.time()
    args = parse_args(argv)
    start_pool_early(args)
    ctx = Context(args)
    # what it reads must not be rewritten meanwhile: a shared lock on each (pipeline/lock.py)
    takes = [partial(FolderLock, ctx.data / name, "verify.py", shared=True)
             for name in ("cleaned", "dedup_exact", "dedup", "tokenizer")
             if (ctx.data / name).is_dir()]
    if (ctx.data / PACK_MANIFEST).exists():
        takes.append(partial(FolderLock, ctx.data, "verify.py", shared=True, name="pack_parallel",
                             what=f"pack_parallel's output in {ctx.data}"))
    # its own work folder (.verify.partial), which every run empties: one run at a time
    if ctx.data.is_dir():
        takes.append(partial(FolderLock, ctx.data, "verify.py", name="verify",
                             what=f"verify's work folder {ctx.data / SCAN}"))
    locks = lock_all(takes)   # all or none: a refused one releases those taken before it
    seconds = {}
    try:
        items = []
        for i, fn in enumerate(CHECKS):
            t = time.time()
            items.append(run_check(fn, i + 1, ctx))
            seconds[str(i + 1)] = round(time.time() - t, 3)   # the scan's time goes to the first item that needs it
    finally:
        shutil.rmtree(ctx.data / SCAN, ignore_errors=True)
        for lock in locks:
            lock.release()
    print(render_terminal(items))
    report = report_path(ctx)
    # the same items as data beside the Markdown, for report.py's page (and anyone's script)
    write_report(report, render_markdown(items, ctx.data) + "\n", {
        "data_dir": display_path(ctx.data), "passed": sum(it.ok for it in items),
        "items": [{"num": it.num, "title": it.title, "ok": it.ok, "figures": it.figures,
                   "details": it.details, "cause": it.cause, **it.data} for it in items],
        "manifests": manifest_fingerprints(ctx.data),
        "resources": {"wall_s": round(time.time() - t0, 3), "driver_cpu_s": cpu_seconds(),
                      "worker_cpu_s": sum(p.get("worker_cpu_s", 0) for p in ctx.phases.values()),
                      "driver_peak_rss_mb": peak_rss_mb(), "phases": ctx.phases,
                      "item_wall_s": seconds}})
    print(f"wrote {report} and {report.with_suffix('.json').name}")
    return 0 if all(it.ok for it in items) else 1


if __name__ == "__main__":
    run_stage(main)
