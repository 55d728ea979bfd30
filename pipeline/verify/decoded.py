"""verify.py's items 2 to 4, what the packed tokens decode to: random windows of train.bin
read as text, the tokenizer's round trip on English, Chinese and emoji, and one EOS per
document packed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xxhash

from algorithms.tokenizer_file import EOS_TOKEN, SPECIAL_TOKENS, UINT16_LIMIT, max_token_id
from pipeline.tables import table, window_text
from pipeline.verify.context import Context, Item

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
