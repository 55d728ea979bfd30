"""verify.py's one parallel pass over the packed input (through the executor, one task per
unit): the band hashes of every document (for item 8, no val document in train; those
dedup_minhash.py kept are reused), the val documents' texts (items 7 and 8), and an
id-hashed sample for item 1's token estimate (1% of the documents, section 5.6).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import xxhash

from algorithms.loader import read_val_ids, write_val_ids
from algorithms.arrays import strings
from pipeline.local_pool import abandon_pool
from pipeline.shards import stage_shards
from pipeline.verify.context import Context, Missing

SCAN = ".verify.partial"        # work folder in the data folder, removed afterwards
SAMPLE_MAX_BYTES = 20_000_000   # the estimate's sample: 1% of the documents, at most ~20 MB


def sample_every(docs: int, nbytes: int, min_sample: int = 200) -> int:
    """Take one document in N (by id hash): 1% of a corpus (5.6), but no more than about
    SAMPLE_MAX_BYTES of text on a large one, and at least min_sample documents on a small one."""
    cap = max(100, -(-nbytes // SAMPLE_MAX_BYTES))
    return max(1, min(docs // min_sample, cap))


def scan_unit(rank: int, world_size: int, units: list[dict], work: str, val_ids: str,
              every: int, num_perm: int, ngram: int, seed: int, bands: int, rows: int,
              band_sources: list) -> None:
    """Task `rank`: band hashes of unit `rank`'s documents (band/RANK.npy, b x n), which of
    them are train documents (train/RANK.npy), its val documents and its sample
    (val-RANK.parquet, sample-RANK.parquet). The band hashes are dedup_minhash.py's kept
    ones when band_sources[rank] gives them (pipeline.kept_bands), else computed here."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from algorithms import minhash
    from pipeline.kept_bands import band_rows
    from pipeline.progress import task_progress
    from pipeline.units import Unit, read_unit
    from pipeline.work_files import mapped_npy

    unit, w = Unit(**units[rank]), Path(work)
    kept_band = band_rows(band_sources[rank], unit.row_start, unit.rows)
    if kept_band is not None and kept_band.shape[0] != bands:
        kept_band = None
    for d in ("band", "train"):
        (w / d).mkdir(parents=True, exist_ok=True)
    val = read_val_ids(Path(val_ids))
    mh = minhash.MinHasher(num_perm, ngram, seed)
    band = mapped_npy(w / "band" / f"{rank:05d}.tmp.npy", np.uint64, (bands, unit.rows))
    train = np.zeros(unit.rows, bool)
    vals, sample, start, docs = [], [], 0, 0
    for b in read_unit(unit, columns=["id", "text"], batch_rows=2048):
        ids, texts = [str(i) for i in b.column(0).to_pylist()], b.column(1).to_pylist()
        n = len(ids)
        if kept_band is not None:
            band[:, start:start + n] = kept_band[:, start:start + n]
        else:
            band[:, start:start + n] = minhash.band_hashes(mh.signatures(texts), bands, rows)
        for k, (i, t) in enumerate(zip(ids, texts)):
            if t is None:
                continue        # pack skipped it: in neither file
            docs += 1
            if i in val:
                vals.append((i, t))
            else:
                train[start + k] = True
            if xxhash.xxh64_intdigest(i.encode("utf-8"), 7) % every == 0:
                sample.append(t)
        start += n
        task_progress().add(n, int(pc.sum(pc.binary_length(b.column(1))).as_py() or 0))
    band.flush()
    del band
    os.replace(w / "band" / f"{rank:05d}.tmp.npy", w / "band" / f"{rank:05d}.npy")
    np.save(w / "train" / f"{rank:05d}.npy", train)
    pq.write_table(pa.table({"id": strings([i for i, _ in vals]),
                             "text": strings([t for _, t in vals])}), w / f"val-{rank:05d}.parquet")
    pq.write_table(pa.table({"text": strings(sample)}), w / f"sample-{rank:05d}.parquet")
    from pipeline.task_results import save_task_result
    save_task_result(work, "scan", rank, {"docs": docs, "val": len(vals), "sample": len(sample),
                                          "bands_kept": kept_band is not None})


def scan_corpus(ctx: Context) -> dict:
    """Run the scan; the val documents' texts, the sample, and where the band hashes are."""
    import pyarrow.parquet as pq

    from algorithms.minhash import SIGNATURE_VERSION
    from pipeline.executors import run_tasks
    from pipeline.kept_bands import output_band_sources
    from pipeline.task_results import load_task_results
    from pipeline.units import plan_units, unit_offsets

    units = plan_units(stage_shards(ctx.input_dir), ctx.args.task_mb)
    work = ctx.data / SCAN
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    ids_file = work / "val_ids.txt"
    write_val_ids(ids_file, sorted(ctx.val_ids))
    c = ctx.pack_counts
    every = sample_every(int(c.get("docs_out", 0)), int(c.get("bytes_out", 0)))
    mh = minhash_config(ctx)
    sources, band_note = output_band_sources(ctx.input_dir, mh, SIGNATURE_VERSION)
    try:
        ctx.phases["scan"] = run_tasks(
            scan_unit, len(units), ctx.args, work / "_logs", "verify",
            total_docs=sum(u.rows for u in units), total_bytes=sum(u.text_bytes for u in units),
            units=[u.to_dict() for u in units], work=str(work), val_ids=str(ids_file),
            every=every, **mh, band_sources=[sources.get(Path(u.shard).name) for u in units])
    except BaseException:
        # a task failed: the pool's other workers would go on writing into the work folder
        # after the run (or the next item's scan) has emptied it, so they are stopped first
        abandon_pool()
        raise
    res = load_task_results(work, "scan", len(units))
    val = {}
    for r in range(len(units)):
        t = pq.ParquetFile(work / f"val-{r:05d}.parquet").read()
        val.update(zip(t.column("id").to_pylist(), t.column("text").to_pylist()))
    sample = [x for r in range(len(units))
              for x in pq.ParquetFile(work / f"sample-{r:05d}.parquet").read().column("text").to_pylist()]
    return {"val": val, "sample": sample, "docs": sum(r["docs"] for r in res), "units": units,
            "offsets": unit_offsets(units), "work": work, "minhash": mh,
            "bands_kept": sum(r["bands_kept"] for r in res), "band_note": band_note}


def minhash_config(ctx: Context) -> dict:
    """dedup_minhash.py's MinHash settings as that stage ran (its defaults otherwise)."""
    try:
        cfg = ctx.stage_manifest("dedup_minhash")[1]["config"]
    except Missing:
        cfg = {}
    return {"num_perm": cfg.get("num_perm", 128), "ngram": cfg.get("ngram", 5),
            "seed": cfg.get("seed", 1), "bands": cfg.get("bands", 16), "rows": cfg.get("rows", 8)}

