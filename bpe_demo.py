"""Section 4.2 of the tutorial: BPE worked by hand, on a corpus of four words.

    python bpe_demo.py                        # the tutorial's printout, 5 merges
    python bpe_demo.py --merges 10            # keep merging
    python bpe_demo.py --corpus "hug:10 pug:5 pun:12 bun:4 hugs:5"

BPE in one sentence: find the most frequent pair of adjacent symbols, merge it into a
new symbol, repeat. Every word starts as its characters plus an end-of-word marker
`</w>` (so the `low` inside `lower` is told apart from the whole word `low`).

Ties are broken the way the tutorial's printout breaks them: among pairs with the same
count, the pair seen first wins, scanning the corpus word by word (in the order given)
and each word left to right. Python's sort is stable, so sorting the first-seen-ordered
counts by count alone gives exactly that order.

The tutorial's printout has one misprint: after merge 5 it shows `ne w est</w> ×6`,
but no n+e merge has happened by then, so the segmentation is `n e w est</w> ×6`. This
script prints the correct one (tests/test_bpe_demo.py checks every line).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from pipeline.errors import ArgumentParser, StageError, run_stage

END = "</w>"
TUTORIAL_CORPUS = "low:5 lower:2 newest:6 widest:3"
TOP = 4  # pairs shown per merge, as in the tutorial

Pair = tuple[str, str]
Corpus = list[tuple[list[str], int]]  # (symbols of a word, its count), in corpus order


def parse_corpus(spec: str) -> list[tuple[str, int]]:
    """'low:5 lower:2' (spaces, commas or newlines between entries), or a file of them."""
    p = Path(spec)
    if ":" not in spec and not p.exists():
        raise StageError(f"--corpus {spec}: no such file (or give word:count entries)")
    if "\n" not in spec and p.is_file():
        try:
            spec = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise StageError(f"--corpus {p}: not UTF-8 text (byte {e.start})") from None
    words: list[tuple[str, int]] = []
    for item in re.split(r"[\s,]+", spec.strip()):
        if not item:
            continue
        word, sep, count = item.rpartition(":")
        if not sep or not word or not count.isascii() or not count.isdigit() or int(count) <= 0:
            raise StageError(f"--corpus: bad entry {item!r} (expected word:count, count > 0)")
        words.append((word, int(count)))
    if not words:
        raise StageError("--corpus: no word:count entries")
    return words


def split_words(words: list[tuple[str, int]]) -> Corpus:
    """Each word as its characters plus the end-of-word marker."""
    return [(list(w) + [END], c) for w, c in words]


def count_pairs(corpus: Corpus) -> list[tuple[Pair, int]]:
    """Adjacent-pair counts, most frequent first; ties keep first-seen order."""
    counts: dict[Pair, int] = {}
    for symbols, c in corpus:
        for pair in zip(symbols, symbols[1:]):
            counts[pair] = counts.get(pair, 0) + c
    return sorted(counts.items(), key=lambda kv: -kv[1])  # stable: ties stay in seen order


def merge(corpus: Corpus, pair: Pair) -> Corpus:
    """Replace every occurrence of `pair` (left to right, no overlaps) with one symbol."""
    a, b = pair
    out = []
    for symbols, c in corpus:
        new, i = [], 0
        while i < len(symbols):
            if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
                new.append(a + b)
                i += 2
            else:
                new.append(symbols[i])
                i += 1
        out.append((new, c))
    return out


def show(corpus: Corpus) -> str:
    return " | ".join(f"{' '.join(s)} ×{c}" for s, c in corpus)


def run(corpus: Corpus, merges: int) -> list[str]:
    """The printout, as lines: per merge the top pairs, the merge and the result."""
    lines: list[str] = []
    for k in range(1, merges + 1):
        pairs = count_pairs(corpus)
        if k > 1:
            lines.append("")
        lines.append(f"--- 第 {k} 次合并 ---")
        if not pairs:
            lines.append("  没有相邻的符号对了：每个词都已经是一个符号，停止。")
            break
        top = ", ".join(f"({a}+{b}):{n}" for (a, b), n in pairs[:TOP])
        (a, b), n = pairs[0]
        corpus = merge(corpus, (a, b))
        lines.append(f"  频次最高的几对: {top}")
        lines.append(f"  合并: {a} + {b}  ->  {a + b}   (出现 {n} 次)")
        lines.append(f"  结果: {show(corpus)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--merges", type=int, default=5, help="how many merges to run (default 5)")
    p.add_argument("--corpus", default=TUTORIAL_CORPUS,
                   help=f"word:count entries, or a file of them (default: {TUTORIAL_CORPUS!r})")
    args = p.parse_args(argv)
    if args.merges < 1:
        raise StageError("--merges must be at least 1")
    print("\n".join(run(split_words(parse_corpus(args.corpus)), args.merges)))
    return 0


if __name__ == "__main__":
    run_stage(main)
