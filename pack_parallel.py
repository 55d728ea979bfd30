"""Step 5 (tutorial section 5): tokenize every document and pack the ids into train.bin / val.bin.

    python pack_parallel.py                       # data/dedup/ -> data/train.bin, data/val.bin
    python pack_parallel.py --val-ratio 0.001 --seed 42
    python pack_parallel.py --engine reference    # encode_shard and concat, as 5.5

In the tutorial's order: 5.7 splits by document, before packing (a document goes to
val.bin when the seeded hash of its id is among the n_val smallest; pack_report/val_ids.txt
lists them); 4.6 refuses a tokenizer whose largest id does not fit in uint16; 5.5 encodes
one task per unit of the input, each loading the tokenizer itself and writing its own
parts, every document followed by exactly one <|endoftext|> (5.3; a literal
"<|endoftext|>" in a document is plain text); then the parts are concatenated in task
order, so the output is byte-identical for any --workers. The fast engine encodes with
HF's byte-level BPE compiled (algorithms/packing_fast.py), only after it gave HF's ids on
a sample of this corpus (--check-bytes); --engine reference with HF's encode, document by
document. A rerun whose input, tokenizer and config match encodes nothing (--force packs
anyway). Read the result with np.memmap("data/train.bin", dtype=np.uint16, mode="r"), or
algorithms.loader.get_batch (5.2). More: docs/stages/pack.md.
"""

from __future__ import annotations

import pipeline  # noqa: F401  (first, before numpy: see pipeline/__init__.py)

import os
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from algorithms import packing
from algorithms.arrays import to_numpy
from algorithms.ids import id_hashes
from algorithms.packing import TOKEN_BINS, doc_lengths, get_encoder
from algorithms.tokenizer_file import check_fits_uint16, eos_id, load_tokenizer
from pipeline import layout
from pipeline.errors import StageError, run_stage
from pipeline.manifest import MANIFEST
from pipeline.pack_check import build_encoders, choose_encoder
from pipeline.pack_report import REPORT_DIR, merge_counts, summary, write_reports
from pipeline.progress import task_progress
from pipeline.shards import HashingFile, file_digest, file_record, ids_with_hash, iter_batches
from pipeline.stage import Output, Run, Stage
from pipeline.tables import size_arg
from pipeline.task_results import save_task_result
from pipeline.units import Unit, read_unit

MANIFEST_NAME = layout.PACK_MANIFEST
VAL_IDS = f"{REPORT_DIR}/val_ids.txt"
PARTS = "_parts"


# --------------------------------------------------------------------------------------
# 5.5: one task per unit, each loading the tokenizer itself and writing its own parts:
# 5.7's split by document, 5.4's ids with one EOS after each document.
# --------------------------------------------------------------------------------------

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
            # per-document byte counts and null flags in Arrow, not in a Python loop
            nbytes = to_numpy(pc.binary_length(col), null=0)
            valid = to_numpy(col.is_valid())
            docs_in += len(ids)
            is_val = id_hashes(ids, seed) <= np.uint64(threshold)          # 5.7
            for split, want in (("train", False), ("val", True)):
                sel = np.flatnonzero(is_val == want)
                keep = sel[valid[sel]]
                nulls += len(sel) - len(keep)
                arr = enc.pack_rows(col, keep)                               # 5.4 + 5.3
                arr.tofile(files[split])
                hist += np.histogram(doc_lengths(arr, enc.eos), TOKEN_BINS)[0]
                s = c[split]
                s["docs"] += len(keep)
                s["tokens"] += int(arr.size)
                s["eos"] += len(keep)
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
        "tokens_per_doc_hist": hist.tolist(), "inherited": enc.built_by != os.getpid()})


def part_path(staging: str | os.PathLike, split: str, rank: int) -> Path:
    return Path(staging) / PARTS / f"{split}-{rank:05d}.bin"


def val_split(shards: list[Path], val_ratio: float, seed: int) -> tuple[int, int, int]:
    """5.7: (threshold, documents, val documents) from every document's id hash; a
    document goes to val.bin when its hash is at most the threshold."""
    hashes = [id_hashes(b.column(0).to_pylist(), seed)
              for s in shards for b in iter_batches(s, columns=["id"], batch_rows=65536)]
    try:
        return packing.val_threshold(np.concatenate(hashes) if hashes else
                                     np.zeros(0, np.uint64), val_ratio)
    except packing.RepeatedIds as e:   # name one repeated id
        found = ids_with_hash(shards, seed, e.hash)
        if not found:
            raise StageError(f"{shards[0].parent}: {e}") from None
        name, n = max(found.items(), key=lambda kv: kv[1])
        raise StageError(f"{shards[0].parent}: the id {name!r} is not unique ({n} documents "
                         f"have it): val would take {e.chosen} documents instead of "
                         f"{e.wanted}; 5.7 splits by id, so ids must be unique") from None
    except ValueError as e:
        raise StageError(f"{shards[0].parent}: {e}") from None


def concat_parts(parts: list[Path], out: Path) -> str:
    """5.5's concat into `out`, through a temporary name; returns out's digest, hashed on
    the way (the file is not read again)."""
    for p in parts:
        if not p.exists():
            raise StageError(f"{p} is missing; rerun pack_parallel.py")
    tmp = out.with_name(out.name + ".tmp")
    with HashingFile(tmp) as fout:
        packing.concat(parts, fout)
    os.replace(tmp, out)
    return fout.hexdigest()


def run(run: Run) -> Output:
    """5.7's split, 5.5's parallel encoding (with the identity check), the concatenation."""
    args = run.args
    tok = load_tokenizer(args.tokenizer)
    eos = eos_id(tok, args.tokenizer)
    with run.phase("split"):
        threshold, n_docs, n_val = val_split(run.shards, args.val_ratio, args.seed)
    kind, enc_info = choose_encoder(run)    # the fast one, if it gives HF's ids here
    results = encode(run, kind, threshold)
    # tasks in forked workers that used the encoder built before the fork (build_encoders)
    enc_info["tasks_with_inherited_encoder"] = sum(bool(r.get("inherited")) for r in results)
    with run.phase("concatenate"):                                       # 5.5: concat
        outs, digests = {}, {}
        for s in ("train", "val"):
            outs[s] = run.staging / f"{s}.bin"
            digests[s] = concat_parts(
                [part_path(run.staging, s, r) for r in range(len(run.units))], outs[s])

    counts = merge_counts(results, n_docs, n_val, eos, kind, tok, args.tokenizer,
                          file_digest(args.tokenizer), args.output)
    if counts["val"]["docs"] == 0:   # the ones chosen had no text (download_data drops those)
        raise StageError(f"{args.input}: val.bin would be empty: the {n_val} document(s) chosen "
                         "for val have no text (null); drop null texts first, or choose "
                         "another --seed or --val-ratio")
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
    return Output(files, counts, extra={"encoder": enc_info}, report_dir=REPORT_DIR,
                  summary=[summary(counts, run.staged.timings, args.output)])


def encode(run: Run, kind: str, threshold: int) -> list[dict]:
    """The encode phase: one task per unit."""
    a = run.args
    run.parallel("encode", pack_unit, units=run.unit_dicts(), staging=str(run.staging),
                 tokenizer=str(a.tokenizer), encoder=kind, seed=a.seed, threshold=threshold,
                 batch_rows=a.batch_rows)
    return run.results("pack")


def flags(p, argv) -> None:
    p.add_argument("--tokenizer", default=str(layout.TOKENIZER),
                   help="default: data/tokenizer/tokenizer.json")
    p.add_argument("--val-ratio", type=float, default=0.001,
                   help="share of documents for val.bin, at least one (default 0.001)")
    p.add_argument("--seed", type=int, default=42, help="seed of the val split (default 42)")
    p.add_argument("--encoder", choices=["auto", "numba", "tiktoken", "hf"], default="auto",
                   help="auto: the compiled BPE (numba) if it converts and matches HF on a "
                        "sample, else HF; tiktoken: the same vocabulary in tiktoken")
    p.add_argument("--check-bytes", type=size_arg, default=1_000_000,
                   help="text compared between the fast encoder and HF (default 1 MB)")
    p.add_argument("--batch-rows", type=int, default=1024,
                   help="documents encoded per batch: bounds each task's memory (default 1024)")


def check(a) -> None:
    if not 0 < a.val_ratio < 1:
        raise StageError(f"--val-ratio {a.val_ratio}: must be above 0 and below 1")
    if not 0 <= a.seed < 2 ** 64:
        raise StageError(f"--seed {a.seed}: must be between 0 and 2**64-1")
    if a.batch_rows <= 0:
        raise StageError(f"--batch-rows {a.batch_rows}: must be positive")
    if a.batch_rows >= 2 ** 63:   # Arrow reads batches of an int64 number of rows
        raise StageError(f"--batch-rows {a.batch_rows}: must be at most 2**63-1")
    if a.check_bytes < 0:
        raise StageError(f"--check-bytes {a.check_bytes}: must be 0 (no identity check) or more")
    if a.engine == "reference" and a.encoder != "auto":
        raise StageError(f"--encoder {a.encoder} chooses the fast engine's encoder; --engine "
                         "reference encodes with HF tokenizers, a document at a time (5.5)")
    # train.bin goes beside the stages' folders, never into one: that stage's next run
    # replaces its folder whole, and train.bin with it
    other = Path(a.output) / MANIFEST
    if other.exists():
        raise StageError(f"--output {a.output}: holds another stage's output ({other}); "
                         "give the data folder that holds the stages' folders (default: data)")
    # 4.6: refuse a vocabulary that does not fit uint16 before touching anything else
    tok = load_tokenizer(a.tokenizer)
    check_fits_uint16(tok, a.tokenizer)
    eos_id(tok, a.tokenizer)


def extra_inputs(a) -> dict:
    """The tokenizer's manifest, when it has one: a retrained tokenizer makes this stale."""
    m = Path(a.tokenizer).parent / MANIFEST
    return {"tokenizer": m} if m.exists() else {}


def config(run: Run) -> dict:
    a = run.args
    return {"val_ratio": a.val_ratio, "seed": a.seed, "encoder": a.encoder,
            "dtype": "uint16", "tokenizer_xxh3_128": file_digest(a.tokenizer),
            "task_mb": a.task_mb}


def space(run: Run) -> int:
    """2 bytes per token, in the parts and then in train.bin: about twice 0.8 bytes per
    byte of text (at 2.5 text bytes per token; Chinese takes fewer)."""
    return int(2 * 0.8 * run.total_bytes)


STAGE = Stage("pack_parallel", __doc__, run, flags=flags, check=check, config=config,
              space=space, reads=layout.DEDUP, writes=layout.DATA,
              output_help="folder for train.bin, val.bin, pack_manifest.json (default: data)",
              reuse_current=True, files_into=True, manifest_name=MANIFEST_NAME,
              extra_inputs=extra_inputs, compiled=lambda a: a.engine == "fast",
              prefork=build_encoders, engines=True,
              current_note=lambda run: f"its report: {Path(run.args.output) / REPORT_DIR}/")


def main(argv: list[str] | None = None) -> int:
    return STAGE.main(argv)


if __name__ == "__main__":
    run_stage(main)
