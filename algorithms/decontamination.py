"""Decontamination: the n-grams of evaluation items found in a training document.

If a benchmark's questions and answers are in train.bin, the model's score on that
benchmark says little. GPT-3 removed every document sharing a 13-gram with its evaluation
sets; datatrove's NGramsDecontIndexer / NGramsDecontFilter do the same with 12-grams. The
steps, on plain Python strings:

    normalise(text)          datatrove's simplify_text: lower case, every number -> "0",
                             punctuation -> space, accents dropped
    tokens(text)             the words of the normalised text as datatrove counts them
                             (algorithms/words.py: spaCy's English rules), every Chinese
                             character a token of its own
    item_ngrams(q, a, n)     an item's n-grams: those of its answer, and those that
                             overlap the end of its question and the start of its answer
                             (datatrove's find_overlap_ngrams); a text with no answer
                             (one line of a .txt file) is all answer
    ngram_hash(grams)        64 bits: FNV-1a of each token's code points, combined by a
                             polynomial (so the compiled path can roll it along a text)
    build_index(items, n)    every item's n-gram hashes, sorted, each with its item
    matched_ngrams(text, ..) how many of the document's n-grams are in the index: the
                             signal of clean.py's decontaminate rule
    matches(text, ..)        where they are, and which item each comes from (the report)

    index = build_index([("What is the capital of France?", "Paris")], n=5)
    matched_ngrams("... what is the capital of france paris ...", index)  # -> 1

Why a count and not "any n-gram": the count is the rule's signal and the threshold is
kept apart from it (a rerun with another threshold measures nothing); at the default
threshold 0 one shared n-gram removes the document, as in GPT-3 and datatrove; k
consecutive shared n-grams are a copied run of n + k - 1 tokens, so --sweep
decont_max_ngrams=0,5,20 shows what asking for longer copies would keep.

algorithms/decontamination_fast.py gives the same counts for a whole batch, compiled.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from pathlib import Path
from typing import Iterable, NamedTuple

import numpy as np
from datatrove.utils.text import PUNCTUATION

from .words import words

NGRAM = 13              # GPT-3's 13-grams (datatrove: 12)
MASK = (1 << 64) - 1
FNV_OFFSET, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3
BASE = 0x9E3779B97F4A7C15   # the n-gram polynomial's base (odd)
VERSION = "1"           # of normalise/tokens/ngram_hash: a change re-measures the signal

# datatrove.utils.text.simplify_text's steps, in its order
NUMBERS = re.compile(r"\d+([.,،٫⎖⎗⎘]\d+)?")    # str patterns: \d is Unicode's Nd
PUNCT_TO_SPACE = str.maketrans(PUNCTUATION, " " * len(PUNCTUATION))


# --------------------------------------------------------------------------------------
# Text to tokens
# --------------------------------------------------------------------------------------

def normalise(text: str) -> str:
    """datatrove's simplify_text with its defaults: lower case, numbers to "0", its
    punctuation to spaces, whitespace runs to one space, accents (combining marks after
    NFD) dropped."""
    text = text.lower()
    text = NUMBERS.sub("0", text)
    text = text.translate(PUNCT_TO_SPACE)
    text = " ".join(text.split())
    text = "".join(c for c in unicodedata.normalize("NFD", text)
                   if unicodedata.category(c) != "Mn")
    return text.strip()


def tokens(text: str) -> tuple[str, ...]:
    """The tokens n-grams are made of: the words of the normalised text (a Chinese
    character is one)."""
    return words(normalise(text))


# --------------------------------------------------------------------------------------
# N-grams and their hashes
# --------------------------------------------------------------------------------------

@lru_cache(1 << 16)
def token_hash(token: str) -> int:
    """FNV-1a, 64 bits, of the token's code points."""
    h = FNV_OFFSET
    for ch in token:
        h = ((h ^ ord(ch)) * FNV_PRIME) & MASK
    return h


def ngram_hash(grams: Iterable[str]) -> int:
    """sum of token_hash(t_i) * BASE ** (n - 1 - i), mod 2**64."""
    h = 0
    for t in grams:
        h = (h * BASE + token_hash(t)) & MASK
    return h


def ngrams(toks: tuple[str, ...], n: int) -> list[tuple[str, ...]]:
    return [toks[i:i + n] for i in range(len(toks) - n + 1)]


def item_ngrams(question: str | None, answer: str, n: int = NGRAM) -> list[tuple[str, ...]]:
    """The n-grams that reveal an item: its answer's, and those overlapping the end of
    the question and the start of the answer (each needs at least one token of both).
    No question: the answer's alone. An n-gram of fewer than half distinct tokens is
    left out: "0 0 0 ..." (a table of numbers, normalised) or a run of box-drawing
    characters is in countless documents and tells nothing of the item."""
    a = tokens(answer)
    grams = ngrams(a, n)
    if question:
        q = tokens(question)
        grams += [q[len(q) - (n - 1 - i):] + a[:i + 1] for i in range(n - 1)
                  if len(q) >= n - 1 - i and len(a) >= i + 1]
    return [g for g in grams if telling(g)]


def telling(gram: tuple[str, ...]) -> bool:
    """Whether an n-gram has at least half as many distinct tokens as tokens."""
    return 2 * len(set(gram)) >= len(gram)


class Index(NamedTuple):
    """The evaluation items' n-gram hashes, sorted (uint64), and for each the first item
    it came from (int64, an index into the items given to build_index)."""
    hashes: np.ndarray
    items: np.ndarray
    n: int


def build_index(items: list[tuple[str | None, str]], n: int = NGRAM) -> Index:
    """(question, answer) pairs -> their n-grams' hashes, each once, with its first item."""
    found: dict[int, int] = {}
    for i, (question, answer) in enumerate(items):
        for g in item_ngrams(question, answer, n):
            found.setdefault(ngram_hash(g), i)
    hashes = np.array(sorted(found), dtype=np.uint64)
    return Index(hashes, np.array([found[int(h)] for h in hashes], dtype=np.int64), n)


def item_of(index: Index, h: int) -> int:
    """The item an n-gram hash came from, or -1."""
    at = int(np.searchsorted(index.hashes, np.uint64(h)))
    return int(index.items[at]) if at < len(index.hashes) and index.hashes[at] == h else -1


# --------------------------------------------------------------------------------------
# A document against the index
# --------------------------------------------------------------------------------------

def matched_ngrams(text: str, index: Index) -> int:
    """How many of the document's n-grams (by position) are n-grams of an item."""
    return sum(item_of(index, ngram_hash(g)) >= 0 for g in ngrams(tokens(text), index.n))


class Match(NamedTuple):
    item: int          # the item (build_index's order)
    first: int         # the first and last token of the matched n-gram, in tokens(text)
    last: int
    ngram: str         # its tokens, joined by spaces


def matches(text: str, index: Index) -> list[Match]:
    """Each matched n-gram of the document, in order, with its item (for the report)."""
    toks = tokens(text)
    out = []
    for i, g in enumerate(ngrams(toks, index.n)):
        item = item_of(index, ngram_hash(g))
        if item >= 0:
            out.append(Match(item, i, i + index.n - 1, " ".join(g)))
    return out


def token_spans(text: str) -> list[tuple[int, int]]:
    """The characters of `text` each token of tokens(text) comes from: the tokens of each
    whitespace-free run (a Chinese character alone, or a run of other characters) share
    its span. (Normalising never joins two runs, so the runs' tokens are the text's.)"""
    spans = []
    for chunk in re.finditer(r"\S+", text):
        for run in re.finditer(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|"
                               r"[^\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+",
                               chunk.group()):
            span = (chunk.start() + run.start(), chunk.start() + run.end())
            spans += [span] * len(tokens(run.group()))
    if len(spans) != len(tokens(text)):   # a run cut where the tokenizer does not: chunks
        spans = [(c.start(), c.end()) for c in re.finditer(r"\S+", text)
                 for _ in range(len(tokens(c.group())))]
    return spans


def matched_spans(text: str, index: Index,
                  found: list[Match] | None = None) -> list[tuple[int, int]]:
    """The character spans of `text` that its matched n-grams cover, merged (to highlight
    them); found: matches(text, index), when the caller has them already."""
    found = matches(text, index) if found is None else found
    if not found:
        return []
    where = token_spans(text)
    covered = np.zeros(len(where) + 1, bool)
    for m in found:
        covered[m.first:m.last + 1] = True
    out: list[tuple[int, int]] = []
    for t, (a, b) in enumerate(where):
        if not covered[t]:
            continue
        if out and t and covered[t - 1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


# --------------------------------------------------------------------------------------
# The index on disk (clean.py's rule, the decontaminate pack: algorithms/rule_packs.py)
# --------------------------------------------------------------------------------------

def save_index(index: Index, path: Path) -> None:
    """The index as one .npz: hashes (uint64), items (int32), n. 12 bytes an n-gram."""
    with open(path, "wb") as f:
        np.savez(f, hashes=index.hashes, items=index.items.astype(np.int32),
                 n=np.int64(index.n))


def load_index(path: Path) -> Index:
    with np.load(path) as z:
        return Index(z["hashes"], z["items"], int(z["n"]))
