"""Step 5 of the tutorial: tokenize every document and pack the ids into train.bin / val.bin.

    python pack_parallel.py                       # data/dedup/ -> data/train.bin, data/val.bin
    python pack_parallel.py --workers 8 --val-ratio 0.001 --seed 42

What it does, in the order the tutorial asks for it:

- 5.7 split by *document*, before packing: a document goes to val.bin when the seeded
  hash of its id is among the n_val smallest (n_val = max(1, int(N * val_ratio))). The
  choice depends only on the ids and the seed, never on --workers or on how the
  documents are spread over shards. The val ids are listed in pack_report/val_ids.txt.
- 5.3 every document is followed by exactly one <|endoftext|>; text inside a document
  never becomes a special token (a literal "<|endoftext|>" is encoded as plain bytes).
- 4.6 a tokenizer whose largest id does not fit in uint16 is refused before any work.
- 5.5 one task per unit of at most --task-mb MB of the input (a few row groups of one
  shard): each task loads the tokenizer itself and writes its own part files; the
  driver concatenates the parts in corpus order, so the output is byte-identical for any
  --workers, any --task-mb and on every rerun.
- Memory is bounded by --batch-rows: a task encodes a batch, writes it as uint16 and
  forgets it. It never holds a shard's ids as a Python list (36 bytes per token).
- Speed: HF tokenizers encodes 2-3.5 MB/s per core. pack encodes with algorithms/packing_fast.py,
  HF's byte-level BPE compiled with numba over UTF-8 bytes (its merge list, its GPT-2
  split pattern, a cache of pieces already seen), at several times HF's speed and faster
  than tiktoken given the same vocabulary (`--encoder tiktoken`, ~12-16 MB/s). Either
  fast path is used only when the tokenizer is a plain byte-level BPE, and only after a
  check on a sample of this corpus that it gives HF's ids; if any differ, pack warns and
  uses HF (--encoder auto), or stops (a fast encoder asked for by name).
- train.bin / val.bin appear only complete (staged, then renamed); the manifest
  data/pack_manifest.json records documents, tokens, EOS counts, dtype, the tokenizer's
  hash and the input's fingerprint. A rerun whose input, tokenizer and config match it,
  with both .bin files and the val ids matching their digests, keeps them and encodes
  nothing (--force packs anyway).

Read the result with `np.memmap("data/train.bin", dtype=np.uint16, mode="r")`, or with
algorithms.loader.get_batch(split, batch_size, seq_len) (5.2).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from pipeline import layout
from pipeline.arrays import to_numpy
from algorithms.packing_fast import BpeEncoder
from pipeline.errors import StageError, run_stage
from pipeline.executors import add_executor_args
from pipeline.task_results import load_task_results, save_task_result
from pipeline.local_pool import start_pool_early
from pipeline.manifest import MANIFEST
from pipeline.tables import human_bytes, markdown_table, save_report, table
from pipeline.progress import task_progress
from pipeline.shards import (HashingFile, file_record, id_hashes, iter_batches, list_shards,
                             open_shard)
from pipeline.staging import StageRun, add_force_arg
from pipeline.units import Unit, describe, plan_units, read_unit
from algorithms.tokenizer_file import (check_fits_uint16, eos_id, load_tokenizer,
                                ordinary_tokenizer, byte_level_unsupported, to_tiktoken,
                                tokenizer_hash)

DTYPE = np.uint16
MANIFEST_NAME = "pack_manifest.json"
REPORT_DIR = "pack_report"
VAL_IDS = f"{REPORT_DIR}/val_ids.txt"
PARTS = "_parts"
CHUNK = 1 << 24  # 16 MB copy blocks when concatenating parts (5.5)


# --------------------------------------------------------------------------------------
# 5.7: the validation split, by document, from a seeded hash of the document id.
# --------------------------------------------------------------------------------------

def n_val_docs(n_docs: int, val_ratio: float) -> int:
    """How many documents go to val.bin: at least one (5.7)."""
    return max(1, int(n_docs * val_ratio))


def val_threshold(shards: list[Path], val_ratio: float, seed: int) -> tuple[int, int, int]:
    """(threshold, n_docs, n_val): a document is in val iff its id hash <= threshold.

    Reads only the id column (8 bytes per document kept in memory), so it is cheap even
    for a large corpus, and it sees every shard: the split is global, not per shard.
    """
    hashes = []
    for s in shards:
        for batch in iter_batches(s, columns=["id"], batch_rows=65536):
            hashes.append(id_hashes(batch.column(0).to_pylist(), seed))
    h = np.concatenate(hashes) if hashes else np.empty(0, np.uint64)
    n = len(h)
    if n < 2:
        raise StageError(f"{shards[0].parent}: {n} document(s); need at least 2 to split "
                         "train and val")
    k = n_val_docs(n, val_ratio)
    if k >= n:
        raise StageError(f"--val-ratio {val_ratio} would put all {n} documents in val")
    return int(np.partition(h, k - 1)[k - 1]), n, k


# --------------------------------------------------------------------------------------
# Encoding: a fast path (compiled BPE or tiktoken) or HF tokenizers; all give uint16 arrays,
# EOS after each document.
# --------------------------------------------------------------------------------------

FAST_ENCODERS = ("numba", "tiktoken")


def fast_encoder(tok, kind: str):
    """The tokenizer's vocabulary as a fast encoder of `kind`, or None when it does not
    convert (anything but a plain byte-level BPE)."""
    if kind == "numba":
        return BpeEncoder.from_tokenizer(tok)
    return to_tiktoken(tok)


class NotConvertible(StageError):
    """The tokenizer cannot be encoded with the fast encoder asked for; `why` says why."""

    def __init__(self, path: str, kind: str, why: str):
        super().__init__(f"{path}: does not convert for --encoder {kind} ({why})")
        self.why = why


class Encoder:
    """Encodes a batch of documents into one flat uint16 array, EOS after every document.

    kind "numba": algorithms/packing_fast.py, HF's byte-level BPE compiled (the default fast path).
    kind "tiktoken": the vocabulary converted to tiktoken (encode_to_numpy with no
    special tokens allowed: document text is always ordinary text).
    kind "hf": HF tokenizers with the added tokens removed, for the same reason.
    """

    def __init__(self, tokenizer_path: str, kind: str):
        tok = load_tokenizer(tokenizer_path)
        self.kind = kind
        self.eos = eos_id(tok, tokenizer_path)
        if kind in FAST_ENCODERS:
            self.fast = fast_encoder(tok, kind)
            if self.fast is None:
                raise NotConvertible(tokenizer_path, kind, byte_level_unsupported(tok)
                                     or "not a byte-level vocabulary")
        else:
            self.hf = ordinary_tokenizer(tok)

    def ids(self, text: str) -> np.ndarray:
        """One document's ids (no EOS)."""
        if self.kind == "numba":
            return self.fast.ids(text)
        if self.kind == "tiktoken":
            return self.fast.encode_to_numpy(text, allowed_special=set(), disallowed_special=())
        return np.asarray(self.hf.encode(text, add_special_tokens=False).ids, dtype=np.uint32)

    def pack(self, texts: list[str]) -> np.ndarray:
        """The documents' ids, each followed by one EOS, as one uint16 array."""
        if not texts:
            return np.empty(0, DTYPE)
        if self.kind == "numba":  # one compiled call for the whole batch, EOS included
            return self.fast.pack(texts, self.eos).astype(DTYPE)
        if self.kind == "tiktoken":
            docs = [self.ids(t) for t in texts]
        else:  # encode_batch: HF's fastest call; a batch is small, so memory stays bounded
            docs = [np.asarray(e.ids, dtype=np.uint32)
                    for e in self.hf.encode_batch(texts, add_special_tokens=False)]
        eos = np.array([self.eos], dtype=np.uint32)
        pieces = []
        for d in docs:
            pieces.append(d)
            pieces.append(eos)
        # ids < 65536 was checked before any work, so the cast cannot wrap
        return np.concatenate(pieces).astype(DTYPE)


_ENCODERS: dict[tuple[str, str], Encoder] = {}


def get_encoder(tokenizer_path: str, kind: str) -> Encoder:
    """One Encoder per worker process (5.5: every worker loads the tokenizer itself)."""
    key = (tokenizer_path, kind)
    if key not in _ENCODERS:
        _ENCODERS[key] = Encoder(tokenizer_path, kind)
    return _ENCODERS[key]


def sample_texts(shards: list[Path], max_bytes: int, per_shard: int = 64) -> list[str]:
    """A fixed sample for the identity check: the first documents of every shard, taken
    round-robin until max_bytes of text (different sources are in different shards)."""
    heads = []
    for s in shards:
        batch = next(iter_batches(s, columns=["text"], batch_rows=per_shard), None)
        heads.append([t for t in (batch.column(0).to_pylist() if batch is not None else [])
                      if t is not None])
    out, size = [], 0
    for i in range(per_shard):
        for h in heads:
            if i < len(h) and size < max_bytes:
                out.append(h[i])
                size += len(h[i].encode("utf-8"))
    return out


def first_difference(a: Encoder, b: Encoder, texts: list[str]) -> int | None:
    """Index of the first text on which the two encoders' ids differ, else None."""
    for i, t in enumerate(texts):
        if not np.array_equal(a.ids(t), b.ids(t)):
            return i
    return None


def choose_encoder(tokenizer_path: str, requested: str, texts: list[str]) -> tuple[str, dict]:
    """Pick the fast encoder (auto: numba) when the tokenizer converts and it matches HF
    on `texts`; else HF, with a warning. An explicitly requested fast encoder that cannot
    be used is an error instead."""
    info = {"requested": requested, "checked_docs": len(texts),
            "checked_bytes": sum(len(t.encode("utf-8")) for t in texts)}
    if requested == "hf":
        return "hf", info
    kind = "numba" if requested == "auto" else requested
    try:  # built once here; the check below and this process's tasks reuse it
        fast = get_encoder(tokenizer_path, kind)
    except NotConvertible as e:
        if requested != "auto":
            raise
        print(f"warning: {e}; encoding with HF tokenizers (slower)", file=sys.stderr)
        return "hf", {**info, "fallback": e.why}
    t0 = time.time()
    bad = first_difference(fast, get_encoder(tokenizer_path, "hf"), texts)
    info["check_seconds"] = round(time.time() - t0, 3)
    if bad is not None:
        why = f"{kind} ids differ from HF on sample document {bad} ({texts[bad][:60]!r})"
        if requested != "auto":
            raise StageError(f"--encoder {kind}: {why}")
        print(f"warning: {why}; encoding with HF tokenizers (slower)", file=sys.stderr)
        return "hf", {**info, "fallback": why}
    return kind, info


# --------------------------------------------------------------------------------------
# 5.5: one task per unit, each writing its own part files.
# --------------------------------------------------------------------------------------

def part_path(staging: str | os.PathLike, split: str, rank: int) -> Path:
    return Path(staging) / PARTS / f"{split}-{rank:05d}.bin"


# tokens per document: 0, then quarter-octave bins 1, 1.19, 1.41, ... 2^20 (rounded, unique)
TOKEN_BINS = np.unique(np.concatenate([[0], np.round(2 ** (np.arange(0, 81) / 4))])).astype(np.int64)


def doc_lengths(arr: np.ndarray, eos: int) -> np.ndarray:
    """Tokens of each document in a packed array (EOS excluded): document text never
    contains the EOS id, so the EOS positions are the boundaries."""
    ends = np.flatnonzero(arr == eos)
    return np.diff(np.concatenate([[-1], ends])) - 1


def pack_unit(rank: int, world_size: int, units: list[dict], staging: str, tokenizer: str,
              encoder: str, seed: int, threshold: int, batch_rows: int) -> None:
    """Task `rank`: encode unit `rank` into _parts/train-RANK.bin and _parts/val-RANK.bin.

    Streams the unit batch by batch; each batch's ids go to disk as uint16 at once.
    Writes via temporary names, so a task killed halfway leaves nothing that looks done.
    """
    unit = Unit(**units[rank])
    enc = get_encoder(tokenizer, encoder)
    prog = task_progress()
    c = {s: {"docs": 0, "tokens": 0, "eos": 0, "bytes": 0} for s in ("train", "val")}
    hist = np.zeros(len(TOKEN_BINS) - 1, np.int64)
    nulls, docs_in, val_ids = 0, 0, []
    paths = {s: part_path(staging, s, rank) for s in ("train", "val")}
    paths["train"].parent.mkdir(parents=True, exist_ok=True)
    tmp = {s: p.with_name(p.name + ".tmp") for s, p in paths.items()}
    files = {s: open(p, "wb") for s, p in tmp.items()}
    try:
        for batch in read_unit(unit, columns=["id", "text"], batch_rows=batch_rows):
            ids = batch.column(0).to_pylist()
            col = batch.column(1)
            texts = col.to_pylist()
            # per-document byte counts and null flags in Arrow, not in a Python loop
            nbytes = to_numpy(pc.binary_length(col), null=0)
            valid = to_numpy(col.is_valid())
            docs_in += len(ids)
            is_val = id_hashes(ids, seed) <= np.uint64(threshold)
            for split, want in (("train", False), ("val", True)):
                sel = np.flatnonzero(is_val == want)
                keep = sel[valid[sel]]
                nulls += len(sel) - len(keep)
                # most batches hold no val document: then train is the whole batch
                docs = texts if len(keep) == len(texts) else [texts[i] for i in keep]
                arr = enc.pack(docs)
                arr.tofile(files[split])
                hist += np.histogram(doc_lengths(arr, enc.eos), TOKEN_BINS)[0]
                s = c[split]
                s["docs"] += len(docs)
                s["tokens"] += int(arr.size)
                s["eos"] += len(docs)
                s["bytes"] += int(nbytes[keep].sum())
                if want:
                    val_ids += [str(ids[i]) for i in keep]
            prog.add(len(ids), int(nbytes.sum()))
    finally:
        for f in files.values():
            f.close()
    for s in tmp:
        os.replace(tmp[s], paths[s])
    save_task_result(staging, "pack", rank, {
        "shard": Path(unit.shard).name, "rows": [unit.row_start, unit.row_start + unit.rows],
        "docs_in": docs_in, "null_text": nulls, **c, "val_ids": val_ids,
        "tokens_per_doc_hist": hist.tolist()})


def concat_parts(staging: Path, split: str, tasks: int) -> tuple[Path, str]:
    """Concatenate the parts of one split in shard order (5.5: order is a convention
    nothing checks, so it is fixed here, by rank, not by directory listing). Returns the
    file and its digest, hashed on the way (the file is not read again for it)."""
    out = staging / f"{split}.bin"
    tmp = out.with_name(out.name + ".tmp")
    with HashingFile(tmp) as fout:
        for r in range(tasks):
            p = part_path(staging, split, r)
            if not p.exists():
                raise StageError(f"{p} is missing; rerun pack_parallel.py")
            with open(p, "rb") as fin:
                while chunk := fin.read(CHUNK):
                    fout.write(chunk)
    os.replace(tmp, out)
    return out, fout.hexdigest()


# --------------------------------------------------------------------------------------
# The driver.
# --------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", default=str(layout.DEDUP), help="default: data/dedup")
    p.add_argument("--tokenizer", default=str(layout.TOKENIZER),
                   help="default: data/tokenizer/tokenizer.json")
    p.add_argument("--output", default=str(layout.DATA),
                   help="folder for train.bin, val.bin, pack_manifest.json (default: data)")
    p.add_argument("--val-ratio", type=float, default=0.001,
                   help="share of documents for val.bin, at least one (default 0.001)")
    p.add_argument("--seed", type=int, default=42, help="seed of the val split (default 42)")
    p.add_argument("--encoder", choices=["auto", "numba", "tiktoken", "hf"], default="auto",
                   help="auto: the compiled BPE (numba) if it converts and matches HF on a "
                        "sample, else HF; tiktoken: the same vocabulary in tiktoken")
    p.add_argument("--check-bytes", type=int, default=1_000_000,
                   help="text compared between the fast encoder and HF at start (default 1 MB)")
    p.add_argument("--batch-rows", type=int, default=1024,
                   help="documents encoded per batch: bounds each task's memory")
    add_force_arg(p)
    add_executor_args(p)
    a = p.parse_args(argv)
    if not 0 < a.val_ratio < 1:
        raise StageError(f"--val-ratio {a.val_ratio}: must be between 0 and 1")
    if not 0 <= a.seed < 2 ** 64:
        raise StageError(f"--seed {a.seed}: must be between 0 and 2**64-1")
    if a.batch_rows <= 0 or a.check_bytes < 0:
        raise StageError("--batch-rows must be positive and --check-bytes non-negative")
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start_pool_early(args)
    # 4.6: refuse a vocabulary that does not fit uint16 before touching anything else
    tok = load_tokenizer(args.tokenizer)
    check_fits_uint16(tok, args.tokenizer)
    eos = eos_id(tok, args.tokenizer)
    tok_hash = tokenizer_hash(args.tokenizer)
    shards = list_shards(args.input)
    for s in shards:
        open_shard(s)  # a shard without id/text fails here, in one line, before any work

    tok_manifest = Path(args.tokenizer).parent / MANIFEST
    config = {"val_ratio": args.val_ratio, "seed": args.seed, "encoder": args.encoder,
              "dtype": "uint16", "tokenizer_xxh3_128": tok_hash, "task_mb": args.task_mb}
    run = StageRun("pack_parallel", args.output, config,
                   input_manifest=Path(args.input) / MANIFEST,
                   extra_inputs={"tokenizer": tok_manifest} if tok_manifest.exists() else None,
                   manifest_name=MANIFEST_NAME, files_into=True,
                   reuse_current=not args.force)
    if run.current:   # train.bin and val.bin are what this run would write: keep them
        print(run.current_line())
        print(f"its report: {Path(args.output) / REPORT_DIR}/")
        return 0
    if run.resumed:
        print(f"resuming in {run.staging}", file=sys.stderr)

    with run.phase("split"):
        threshold, n_docs, n_val = val_threshold(shards, args.val_ratio, args.seed)
    with run.phase("check_encoder"):
        kind, enc_info = choose_encoder(args.tokenizer, args.encoder,
                                        sample_texts(shards, args.check_bytes))
    units = plan_units(shards, args.task_mb)
    print(f"pack: {describe(units)}", file=sys.stderr)
    run.parallel("encode", pack_unit, len(units), args,
                 total_docs=sum(u.rows for u in units),
                 total_bytes=sum(u.text_bytes for u in units),
                 units=[u.to_dict() for u in units], staging=str(run.staging),
                 tokenizer=str(args.tokenizer), encoder=kind, seed=args.seed,
                 threshold=threshold, batch_rows=args.batch_rows)
    results = load_task_results(run.staging, "pack", len(units))
    with run.phase("concatenate"):
        outs, digests = {}, {}
        for s in ("train", "val"):
            outs[s], digests[s] = concat_parts(run.staging, s, len(units))

    counts = merge_counts(results, n_docs, n_val, eos, kind, tok, args.tokenizer, tok_hash,
                          args.output)
    for s, p in outs.items():  # the .bin must hold exactly the tokens the tasks reported
        if p.stat().st_size != 2 * counts[s]["tokens"]:
            raise StageError(f"{p}: {p.stat().st_size} bytes but tasks reported "
                             f"{counts[s]['tokens']} tokens; rerun pack_parallel.py")
    val_ids = [i for r in results for i in r["val_ids"]]
    write_reports(run.staging / REPORT_DIR, counts, results, val_ids, enc_info)
    # the parts and task results stay in the staging folder until commit removes it, so
    # a crash before then resumes from them (commit moves the task logs out first)
    files = [file_record(outs[s], digest=digests[s], tokens=counts[s]["tokens"], dtype="uint16")
             for s in ("train", "val")]
    # verify.py reads the val ids: listed, so a pack without them is not current
    files.append(file_record(run.staging / VAL_IDS, name=VAL_IDS))
    run.commit(files, counts, extra={"encoder": enc_info}, report_dir=REPORT_DIR)
    print(summary(counts, run.timings, args.output))
    return 0


def merge_counts(results: list[dict], n_docs: int, n_val: int, eos: int, kind: str, tok,
                 tok_path: str, tok_hash: str, output: str) -> dict:
    split = {s: {k: sum(r[s][k] for r in results) for k in ("docs", "tokens", "eos", "bytes")}
             for s in ("train", "val")}
    docs_in = sum(r["docs_in"] for r in results)
    nulls = sum(r["null_text"] for r in results)
    if docs_in != n_docs:
        raise StageError(f"the shards changed while packing ({n_docs} then {docs_in} documents); "
                         "rerun pack_parallel.py")
    docs_out = split["train"]["docs"] + split["val"]["docs"]
    tokens = split["train"]["tokens"] + split["val"]["tokens"]
    bytes_out = split["train"]["bytes"] + split["val"]["bytes"]
    return {
        "docs_in": docs_in, "docs_out": docs_out, "bytes_in": bytes_out, "bytes_out": bytes_out,
        "removed": {"null text": nulls} if nulls else {},
        "train": split["train"], "val": split["val"],
        "val_docs_chosen": n_val,
        "tokens": tokens, "eos": split["train"]["eos"] + split["val"]["eos"],
        "bytes_per_token": round(bytes_out / tokens, 4) if tokens else None,
        "dtype": "uint16", "eos_id": eos, "encoder": kind,
        # the path is relative to the output folder, like the input manifest's, so a
        # copied or moved data/ folder still finds its own tokenizer
        "tokenizer": {"path": os.path.relpath(Path(tok_path).resolve(), Path(output).resolve()),
                      "xxh3_128": tok_hash,
                      "vocab_size": tok.get_vocab_size(with_added_tokens=True)},
    }


def summary_rows(counts: dict) -> list[list]:
    rows = []
    for s in ("train", "val"):
        c = counts[s]
        rows.append([f"{s}.bin", c["docs"], c["tokens"], c["eos"], human_bytes(c["bytes"]),
                     human_bytes(2 * c["tokens"])])
    rows.append(["total", counts["docs_out"], counts["tokens"], counts["eos"],
                 human_bytes(counts["bytes_out"]), human_bytes(2 * counts["tokens"])])
    return rows


HEADERS = ["file", "documents", "tokens", "EOS", "text", "on disk"]


def write_reports(folder: Path, counts: dict, results: list[dict], val_ids: list[str],
                  enc_info: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    per_task = [[f"{r['shard']} rows {r['rows'][0]:,}-{r['rows'][1]:,}", r["train"]["docs"],
                 r["val"]["docs"], r["train"]["tokens"], r["val"]["tokens"], r["null_text"]]
                for r in results]
    hist = np.sum([r["tokens_per_doc_hist"] for r in results], axis=0).tolist()
    md = ["# pack_parallel.py", "", markdown_table(HEADERS, summary_rows(counts)), "",
          f"encoder: {counts['encoder']} ({enc_info})", "",
          f"bytes per token: {counts['bytes_per_token']}", "", "## Per task", "",
          markdown_table(["input rows", "train docs", "val docs", "train tokens", "val tokens",
                          "null text"], per_task)]
    save_report(folder, "pack_stats", {
        "counts": counts, "encoder": enc_info,
        "tokens_per_doc": {"bins": TOKEN_BINS.tolist(), "counts": hist},
        "tasks": [{k: v for k, v in r.items() if k not in ("val_ids", "tokens_per_doc_hist")}
                  for r in results]}, "\n".join(md))
    tmp = folder / "val_ids.txt.tmp"
    tmp.write_text("".join(f"{i}\n" for i in val_ids), encoding="utf-8")
    os.replace(tmp, folder / "val_ids.txt")


def summary(counts: dict, timings: dict, output: str) -> str:
    secs = timings.get("encode") or 0
    rate = f"{counts['bytes_out'] / secs / 1e6:.1f} MB/s" if secs else "-"
    return "\n".join([
        table(HEADERS, summary_rows(counts)),
        f"encoder {counts['encoder']}, {counts['bytes_per_token']} bytes/token, "
        f"EOS id {counts['eos_id']}, encode {secs:.1f} s ({rate} over all workers)",
        f"wrote {output}/train.bin, {output}/val.bin, {output}/{MANIFEST_NAME} and "
        f"{output}/{REPORT_DIR}/ (pack_stats, val_ids.txt)",
    ])


if __name__ == "__main__":
    run_stage(main)
