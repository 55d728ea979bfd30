"""pack_parallel.py's counts and report: the tasks' counts merged (train and val: documents,
tokens, EOS, text bytes; tokens per document), pack_report/pack_stats.{json,md}, the val
ids, and the table printed after the commit."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from algorithms.loader import write_val_ids
from algorithms.packing import TOKEN_BINS

from .errors import StageError
from .layout import PACK_MANIFEST
from .tables import human_bytes, markdown_table, save_report, table

REPORT_DIR = "pack_report"


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
    write_val_ids(folder / "val_ids.txt", val_ids)


def summary(counts: dict, timings: dict, output: str) -> str:
    secs = timings.get("encode") or 0
    rate = f"{counts['bytes_out'] / secs / 1e6:.1f} MB/s" if secs else "-"
    return "\n".join([
        table(HEADERS, summary_rows(counts)),
        f"encoder {counts['encoder']}, {counts['bytes_per_token']} bytes/token, "
        f"EOS id {counts['eos_id']}, encode {secs:.1f} s ({rate} over all workers)",
        f"wrote {output}/train.bin, {output}/val.bin, {output}/{PACK_MANIFEST} and "
        f"{output}/{REPORT_DIR}/ (pack_stats, val_ids.txt)",
    ])
