"""The LSH band hashes of the documents of dedup_minhash.py's output, from what that stage
kept, so that verify.py does not compute every document's MinHash signature again.

dedup_minhash.py keeps, beside its output, the band hashes of every document of its
input (bands/, one file per work unit: b x rows) and the rows it removed (removed/, the
sorted global rows of its input). Output file part-XXXXX.parquet holds the rows of input
unit XXXXX that were not removed, in order; so the band hashes of its rows are that
unit's band file without the removed columns:

    sources, note = output_band_sources(folder, minhash_settings, SIGNATURE_VERSION)
    band = band_rows(sources[shard_name], row_start, rows)    # b x rows, or None

Everything is checked before use, and anything that does not check out gives None (the
caller then computes the signatures, as without a store): the band hashes must have been
made with the same MinHash settings and signature version, on the input the manifest
names, and the removed rows at the threshold it names; the removed rows (checked once,
by output_band_sources; each task then reads the few pages it needs) and each band file
must match their digests, and the band index the one the manifest recorded; each unit's
rows less the removed ones must be the output
file's row count; and the output file must still be the one its manifest records (its
digest: a task reads its unit's file anyway).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from .filter_phase import keep_mask
from .kept_store import KeptStore, read_verified, recorded_index_digest, whole_piece
from .manifest import MANIFEST


def output_band_sources(folder: str | Path, mh: dict, signature_version: int
                        ) -> tuple[dict[str, dict], str]:
    """{output file name: its band source} for a dedup_minhash output `folder` whose kept
    band hashes were made with the MinHash settings `mh` (num_perm, ngram, seed, bands,
    rows), and one line saying whether they are used and why not. Empty when they are not."""
    folder = Path(folder)
    try:
        m = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}, "no manifest"
    if m.get("stage") != "dedup_minhash":
        return {}, f"{folder} is not dedup_minhash.py's output"
    kept = m.get("kept") or {}
    if "bands" not in kept or "removed" not in kept:
        return {}, "dedup_minhash.py kept no band hashes (--no-keep-signatures)"
    want = {"version": signature_version, "input_fingerprint": (m.get("input") or {}).get("fingerprint"),
            **{k: mh[k] for k in ("ngram", "num_perm", "seed", "bands", "rows")}}
    # what bands/ depends on, exactly; its index as the run that wrote it recorded it (the
    # rows each entry claims set where each output file's band columns start)
    store, why = KeptStore.open(folder / "bands", want,
                                index_digest=recorded_index_digest(folder, "kept", "bands"))
    if store is None:
        return {}, f"kept band hashes not used: {why}"
    deps = kept["removed"].get("depends_on") or {}
    if {k: deps.get(k) for k in want} != want or \
            deps.get("threshold") != (m.get("config") or {}).get("threshold"):
        return {}, "the kept removed rows are not this output's"
    removed, _, why = whole_piece(folder / "removed", deps)
    if removed is not None and read_verified(removed) is None:
        why = f"{Path(removed['path']).name}: digest mismatch"
    if why:
        return {}, f"kept removed rows not used: {why}"
    entries = sorted((e for v in store.by_shard.values() for e in v), key=lambda e: e["name"])
    starts = np.concatenate([[0], np.cumsum([e["rows"] for e in entries])]).tolist()
    out: dict[str, dict] = {}
    for f in m.get("files", []):
        name = f.get("name", "")
        try:
            u = int(name[len("part-"):-len(".parquet")])
        except ValueError:
            return {}, f"{name}: not a unit's output file"
        if name != f"part-{u:05d}.parquet" or u >= len(entries):
            return {}, f"{name}: no kept band hashes for it"
        e = entries[u]
        out[name] = {"band": {"path": str(folder / "bands" / e["name"]), "size": e["size"],
                              "xxh3_128": e["xxh3_128"]},
                     "file": {"path": str(folder / name), "size": f.get("size"),
                              "xxh3_128": f.get("xxh3_128")},
                     "removed": removed["path"], "lo": starts[u], "hi": starts[u + 1],
                     "rows": int(f.get("rows", -1))}
    return out, f"band hashes: dedup_minhash.py's, kept in {folder / 'bands'}"


def band_rows(source: dict | None, row_start: int, rows: int) -> np.ndarray | None:
    """The band hashes (b x rows, uint64) of rows [row_start, row_start + rows) of the
    output file `source` describes, or None when a kept file fails its check or the
    counts do not agree."""
    if source is None:
        return None
    band_bytes = read_verified(source["band"])
    if band_bytes is None or read_verified(source["file"]) is None:   # the file changed since
        return None
    band = np.load(io.BytesIO(band_bytes))
    lo, hi = source["lo"], source["hi"]
    if band.ndim != 2 or band.shape[1] != hi - lo:
        return None
    # checked against its digest by output_band_sources; read here only where it matters
    kept = np.flatnonzero(keep_mask(np.load(source["removed"], mmap_mode="r"), lo, hi))
    if len(kept) != source["rows"] or row_start + rows > len(kept):
        return None
    return np.ascontiguousarray(band[:, kept[row_start:row_start + rows]])
