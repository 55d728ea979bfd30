"""The tokenizer's checks (tutorial 4.7 step 5) and its compression (4.5).

The tutorial's checks, which the checks here contain (its three strings are the
beginnings of the english, chinese and emoji cases; the round trip of a byte-level
BPE does not depend on what surrounds a string):

    assert tok.get_vocab_size() == 32000
    for s in ["Hello world", "机器学习模型训练", "emoji 😀 测试", "a" * 200]:
        assert tok.decode(tok.encode(s).ids) == s
    for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]:
        print(t, tok.token_to_id(t))

and what it leaves out: the largest id at most 65535 (4.6: uint16), special tokens at their
ids, round trips on mixed scripts, whitespace runs, control characters and real
documents, and a literal "<|endoftext|>" in a web page encoded as plain text, never as
the special id (a page must not forge a document boundary). Any miss is a ValueError:
the tokenizer is not saved.

Compression: characters and bytes per token over held-out English and Chinese text
(totals, not a mean of ratios). `measure_compression` is HF's encoder, the reference;
the stage counts tokens with the compiled encoder (algorithms/bpe_trainer.py:
measure_compression_fast, tested to give the same counts), ten times faster.
"""

from __future__ import annotations

import pyarrow as pa


from .tokenizer_file import (BATCH_CHARS, EOS_TOKEN, PIECE_CHARS, SPECIAL_TOKENS, UINT16_LIMIT,
                             max_token_id, ordinary_tokenizer, piece_batches, splits_like_gpt2)

LANG_NAMES = {"en": "English", "zh": "Chinese"}   # the compression's two languages
ID_LIMIT = UINT16_LIMIT        # every id must be below this (65,536) to be stored as uint16 (4.6)


# The round trip must be lossless on these (4.7 step 5, and the cases it leaves out).
ROUND_TRIP_CASES = {
    "english": "Hello world. The quick brown fox jumps over the lazy dog, doesn't it?",
    "chinese": "机器学习模型训练，需要大量干净的数据。",
    "emoji": "emoji 😀 测试 👩‍👩‍👧 🇨🇳",
    "a x 200": "a" * 200,
    "mixed scripts": "GPT-2 用 50257 个 token；Llama 用 32000。Ünïcödé, русский, العربية, 日本語のテキスト",
    "whitespace runs": "a  b\t\tc\n\n\n   d    \r\n  \u3000e \u00a0f   ",
    "control chars": "\x00\x01\x07\x1b[31mred\x1b[0m\x7f\u200b\ufeff end",
    "literal special": f"a web page that says {EOS_TOKEN} and <|im_start|>user",
}
REAL_DOCS_CHECKED = 200  # real documents in the round-trip check (held-out + sample)


def check_vocab(tok, vocab_size: int, sample_bytes: int, min_frequency: int = 2) -> dict:
    got = tok.get_vocab_size(with_added_tokens=True)
    top = max_token_id(tok)
    if got <= 256 + len(SPECIAL_TOKENS) < vocab_size:   # not one merge: no --vocab-size fits
        raise ValueError(
            f"the vocabulary reached only {got:,} of --vocab-size {vocab_size:,} tokens: no "
            f"pair of symbols in the training sample ({sample_bytes / 1e6:,.1f} MB) occurs "
            f"{max(min_frequency, 1):,} times or more (--min-frequency), so not one merge was "
            "made and no --vocab-size can be reached. Use more data"
            + (f", or lower --min-frequency {min_frequency:,}" if min_frequency > 2 else ""))
    if got < vocab_size:
        raise ValueError(
            f"the vocabulary reached only {got:,} of --vocab-size {vocab_size:,} tokens: the "
            f"training sample ({sample_bytes / 1e6:,.1f} MB) is too small to support it. Use "
            f"more data, or lower --vocab-size on purpose (at most {got:,} here; the "
            "bundled sample uses --vocab-size 8000)"
            + (f", or lower --min-frequency {min_frequency:,}" if min_frequency > 2 else ""))
    if got != vocab_size:
        raise ValueError(f"the vocabulary has {got:,} tokens, expected {vocab_size:,}")
    if top >= ID_LIMIT:
        raise ValueError(f"largest token id {top:,} is not below {ID_LIMIT:,} (uint16, 4.6)")
    return {"vocab_size": got, "max_id": top}


def check_special_ids(tok) -> dict:
    got = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    want = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    if got != want:
        bad = [f"{t}={got[t]} (want {want[t]})" for t in SPECIAL_TOKENS if got[t] != want[t]]
        raise ValueError(f"special tokens at the wrong ids: {', '.join(bad)}")
    return got


def check_round_trip(plain, texts: dict[str, str]) -> int:
    """Encode then decode must give back every text exactly (plain-text encoding)."""
    names = list(texts)
    # encode_batch_fast: the same ids as encode_batch, without the offsets nothing reads
    encs = plain.encode_batch_fast([texts[n] for n in names], add_special_tokens=False)
    for name, enc in zip(names, encs):
        back = plain.decode(enc.ids, skip_special_tokens=False)
        if back != texts[name]:
            i = next((k for k, (a, b) in enumerate(zip(back, texts[name])) if a != b),
                     min(len(back), len(texts[name])))
            raise ValueError(f"round trip failed on {name}: {texts[name][max(0, i - 20):i + 20]!r} "
                             f"came back as {back[max(0, i - 20):i + 20]!r}")
    return len(names)


def check_literal_specials(tok, plain) -> dict:
    """A literal special-token string in document text must stay ordinary text."""
    text = f"before {EOS_TOKEN} after <|im_end|>"
    special_ids = set(range(len(SPECIAL_TOKENS)))
    ids = plain.encode(text, add_special_tokens=False).ids
    forged = [i for i in ids if i in special_ids]
    if forged:
        raise ValueError(f"plain text {text!r} was encoded with special ids {forged}: a "
                         "document could forge a boundary")
    asked = tok.encode(EOS_TOKEN).ids  # the full tokenizer, when the special is wanted
    if asked != [tok.token_to_id(EOS_TOKEN)]:
        raise ValueError(f"{EOS_TOKEN} asked for explicitly encodes as {asked}")
    return {"plain_text_ids": len(ids), "explicit_eos_ids": asked}


def verify(tok, vocab_size: int, sample_bytes: int, real_docs: list[str],
           min_frequency: int = 2) -> dict:
    plain = ordinary_tokenizer(tok)
    cases = dict(ROUND_TRIP_CASES)
    cases.update({f"document {i}": t for i, t in enumerate(real_docs)})
    return {
        **check_vocab(tok, vocab_size, sample_bytes, min_frequency),
        "special_ids": check_special_ids(tok),
        "round_trip_texts": check_round_trip(plain, cases),
        "round_trip_real_docs": len(real_docs),
        "literal_special": check_literal_specials(tok, plain),
    }


def compression(encode_lengths, texts: list[str]) -> dict:
    """Characters and UTF-8 bytes per token over `texts` (totals, not a mean of ratios).

    encode_lengths(texts) -> number of tokens of each text.
    """
    if not texts:
        return {"chars_per_token": None, "bytes_per_token": None, "docs": 0,
                "chars": 0, "bytes": 0, "tokens": 0}
    tokens = int(sum(encode_lengths(texts)))
    chars = sum(len(t) for t in texts)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    return {"chars_per_token": round(chars / tokens, 4), "bytes_per_token": round(nbytes / tokens, 4),
            "docs": len(texts), "chars": chars, "bytes": nbytes, "tokens": tokens}


def token_counts(plain, texts: list[str], piece: int = PIECE_CHARS,
                 batch: int = BATCH_CHARS) -> list[int]:
    """The number of tokens of each text under `plain` (ordinary_tokenizer's: special
    tokens are plain text), with HF's memory bounded: about `batch` characters per
    encode_batch_fast call, and long texts in pieces (for a tokenizer that splits like
    GPT-2: the same counts, but near a stretch of `piece` characters with no place to
    cut; for an estimate, and any other tokenizer's texts are counted whole)."""
    counts = [0] * len(texts)
    for todo in piece_batches(texts, piece, batch, cut=splits_like_gpt2(plain)):
        encs = plain.encode_batch_fast([p for _, p in todo], add_special_tokens=False)
        for (i, _), e in zip(todo, encs):
            counts[i] += len(e.ids)
    return counts


def heldout_by_lang(heldout: pa.Table) -> dict[str, list[str]]:
    langs = heldout.column("lang").to_pylist()
    texts = heldout.column("text").to_pylist()
    return {lang: [t for t, l in zip(texts, langs) if l == lang] for lang in ("en", "zh")}


def measure_compression(tok, heldout: pa.Table) -> dict:
    plain = ordinary_tokenizer(tok)

    def lengths(texts):
        return [len(e.ids) for e in plain.encode_batch(texts, add_special_tokens=False)]

    return {lang: compression(lengths, texts) for lang, texts in heldout_by_lang(heldout).items()}


def tokenizer_config(vocab_size: int) -> dict:
    """transformers' tokenizer_config.json: PreTrainedTokenizerFast, eos = <|endoftext|>.

    clean_up_tokenization_spaces must be off, or transformers' decode would rewrite
    " ." as "." and break the lossless round trip."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOS_TOKEN,
        "additional_special_tokens": SPECIAL_TOKENS[1:],
        "clean_up_tokenization_spaces": False,
        "add_prefix_space": False,
        "vocab_size": vocab_size,
    }
