"""verify.py's item 11 (with --eval-sets): no evaluation item in train.bin or val.bin.

The tokens are decoded in chunks, each document's text joined to the next by a newline
(so an item split across two documents is still seen), every chunk overlapping the one
before by OVERLAP tokens (an n-gram cut by a chunk's edge is whole in the next), and the
text checked against the n-gram index of the evaluation sets (pipeline/eval_sets.py,
algorithms/decontamination.py): the compiled count first, the readable matches for the
few chunks that have any. This sees what clean.py's rule cannot: text that never went
through clean.py, and items that crossed a document boundary.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from algorithms import decontamination as D
from algorithms import decontamination_fast
from pipeline import eval_sets, kept_store
from pipeline.verify.context import Context, Item

CHUNK = 1 << 16       # tokens decoded at a time
OVERLAP = 1024        # tokens a chunk shares with the one before (an n-gram's worth, and more)
EXAMPLES = 5
CONTEXT = 160
WINDOW, WINDOW_OVERLAP = 8000, 2000   # characters: matching_windows


def decoded_chunks(ctx: Context, path):
    """(first token, text) of each overlapping chunk of a .bin, EOS decoded as a newline."""
    data = np.memmap(path, dtype=np.uint16, mode="r")
    eos = ctx.eos
    start = 0
    while start < len(data):
        a = max(0, start - OVERLAP)
        toks = np.array(data[a:start + CHUNK], np.int64)
        cuts = np.flatnonzero(toks == eos)
        pieces = np.split(toks, cuts)
        texts = ctx.tok.decode_batch([p[p != eos].tolist() for p in pieces],
                                     skip_special_tokens=False)
        yield a, "\n".join(texts)
        start += CHUNK


def matching_windows(text: str, index, bits) -> list[str]:
    """The parts of a chunk's text that hold a matched n-gram, for the readable matches
    (slow: a chunk is some 250,000 characters): windows of WINDOW characters, each
    overlapping the next by WINDOW_OVERLAP, counted by the compiled path, those that
    match kept; the whole text if its count is not 0 but no window's is (an n-gram longer
    than the overlap)."""
    if not decontamination_fast.matched_ngrams(pa.array([text]), index, bits)[0]:
        return []
    step = WINDOW - WINDOW_OVERLAP
    windows = [text[i:i + WINDOW] for i in range(0, max(1, len(text) - WINDOW_OVERLAP), step)]
    counts = decontamination_fast.matched_ngrams(pa.array(windows), index, bits)
    return [w for w, c in zip(windows, counts) if c] or [text]


def check_eval_sets(ctx: Context) -> Item:
    """Item 11: the items of each evaluation set found in train.bin and val.bin."""
    args = ctx.args
    it = Item(11, "no evaluation item in train.bin / val.bin")
    folder = eval_sets.index_folder(args, kept_store.side_store(ctx.data / "verify", "decont"))
    # (verify.py's check() built it already, or refused the files: the same folder)
    index, bits = decontamination_fast.loaded(str(folder))
    items = pq.read_table(folder / "items.parquet").to_pydict()
    summ = eval_sets.summary(folder)
    found = {}
    for name in ("train.bin", "val.bin"):
        p = ctx.data / name
        if not p.is_file():
            it.fail(f"{p} missing", "pack_parallel.py has not run here; run it")
            continue
        hits: dict[int, int] = {}
        for first, chunk in decoded_chunks(ctx, p):
            for text in matching_windows(chunk, index, bits):
                spans = None
                for m in D.matches(text, index):
                    new = m.item not in hits
                    hits[m.item] = first
                    if new and len(it.data.setdefault("examples", [])) < EXAMPLES:
                        spans = spans if spans is not None else D.token_spans(text)
                        a, b = spans[m.first][0], spans[m.last][1]
                        lo, hi = max(0, a - CONTEXT), min(len(text), b + CONTEXT)
                        it.data["examples"].append({
                            "file": name, "set": items["set"][m.item],
                            "item": items["number"][m.item], "ngram": m.ngram,
                            "text": text[lo:hi], "mark": [a - lo, b - lo]})
        found[name] = hits
    per_set: dict[str, list[int]] = {s: [0, 0] for s in summ["sets"]}
    for k, name in enumerate(("train.bin", "val.bin")):
        for item in found.get(name, {}):
            per_set[items["set"][item]][k] += 1
    total = len(set().union(*[set(h) for h in found.values()]) if found else set())
    it.data["sets"] = {s: {"items": summ["sets"][s]["items"], "in_train": v[0], "in_val": v[1]}
                       for s, v in per_set.items()}
    for s, v in per_set.items():
        it.figures.append(f"{s}: {summ['sets'][s]['items']:,} items ({summ['sets'][s]['too_short']} "
                          f"under {index.n} words, never found): {v[0]} found in train.bin, "
                          f"{v[1]} in val.bin")
    for e in it.data.get("examples", []):
        a, b = e["mark"]
        shown = f"{e['text'][:a]}[[{e['text'][a:b]}]]{e['text'][b:]}"
        it.details.append(f"{e['file']}: {e['set']} item {e['item']}: ...{' '.join(shown.split())}...")
    if total > args.max_eval_items:
        it.fail(f"{total} evaluation items found in the packed tokens (allowed "
                f"{args.max_eval_items})",
                "benchmark text in the training data: rerun clean.py with --rules "
                "...,decontaminate --eval-sets (the same files), then the stages after it")
    return it
