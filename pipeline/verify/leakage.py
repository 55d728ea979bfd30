"""verify.py's item 8: no validation document is in train, exactly (normalised text) or
nearly (MinHash similarity through LSH bands, as dedup_minhash.py finds near copies).
"""

from __future__ import annotations

import numpy as np

from pipeline.verify.context import Context, Item


def val_candidates(scan: dict, vband: np.ndarray) -> list[tuple[int, int]]:
    """(train global index, val index) pairs that share a band hash: every pair LSH would
    compare, found unit by unit with numpy over the scan's band files (each read once)."""
    work, units = scan["work"], scan["units"]
    where: list[dict[int, list[int]]] = [{} for _ in range(vband.shape[0])]
    for j in range(vband.shape[0]):
        for k, h in enumerate(vband[j]):
            where[j].setdefault(int(h), []).append(k)
    keys = [np.array(sorted(w), dtype=np.uint64) for w in where]
    pairs = set()
    for r in range(len(units)):
        tb = np.load(work / "band" / f"{r:05d}.npy")
        train = np.load(work / "train" / f"{r:05d}.npy")
        for j in range(vband.shape[0]):
            for d in np.flatnonzero(np.isin(tb[j], keys[j]) & train):
                for k in where[j][int(tb[j, d])]:
                    pairs.add((int(scan["offsets"][r] + d), k))
    return sorted(pairs)


def check_val_overlap(ctx: Context) -> Item:
    """Item 8. Every val document is compared, through LSH bands, with every train document
    (the scan's band hashes, all cores); the candidate pairs get their MinHash similarity,
    and an exact comparison of normalised texts. Identical normalised texts have identical
    signatures, so an exact copy is always a candidate: the exact check misses nothing."""
    from algorithms import minhash
    from algorithms.exact_dedup import normalise  # the one normalisation (section 3.2)
    from pipeline.units import fetch_rows

    it = Item(8, "no validation document is in train")
    scan = ctx.corpus
    val = scan["val"]
    c = ctx.pack_counts
    if len(val) != c["val"]["docs"]:
        it.fail(f"{len(val)} val ids found in the input, manifest says {c['val']['docs']}",
                "val_ids.txt and val.bin disagree; rerun pack_parallel.py")
    cfg = scan["minhash"]
    hasher = minhash.MinHasher(num_perm=cfg["num_perm"], ngram=cfg["ngram"], seed=cfg["seed"])
    vids = list(val)
    vsig = hasher.signatures([val[i] for i in vids])
    cands = val_candidates(scan, minhash.band_hashes(vsig, cfg["bands"], cfg["rows"]))
    exact, near, best = [], [], 0.0
    if cands:
        gidx = np.array([g for g, _ in cands])
        texts = fetch_rows(scan["units"], scan["offsets"], gidx, "text")
        sims = minhash.similarity(hasher.signatures(texts), vsig[[k for _, k in cands]])
        best = float(sims.max())
        for (g, k), t, sim in zip(cands, texts, sims):
            if sim >= 1.0 and normalise(t) == normalise(val[vids[k]]):
                exact.append(vids[k])
            elif sim >= ctx.args.near_dup_threshold:
                near.append((vids[k], float(sim)))
    it.figures.append(f"exact: {len(val):,} val documents against {scan['docs'] - len(val):,} "
                      f"train documents (normalised text): {len(exact)} in train")
    if exact:
        it.fail(f"val documents also in train: {', '.join(sorted(set(exact))[:5])}",
                "val/train overlap: the split was done on tokens, not documents, or exact "
                "dedup missed copies; rerun dedup_exact.py, then pack_parallel.py")
    it.figures.append(f"near-duplicate: MinHash candidates from LSH bands, Jaccard >= "
                      f"{ctx.args.near_dup_threshold}: {len(near)} pairs ({len(cands)} "
                      f"candidate pairs compared, highest similarity {best:.2f})")
    it.figures.append(f"train band hashes: dedup_minhash.py's kept ones for {scan['bands_kept']} "
                      f"of {len(scan['units'])} units, the rest computed here"
                      + ("" if scan["bands_kept"] else f" ({scan['band_note']})"))
    if near:
        it.fail(f"val documents with near-duplicates in train: "
                f"{', '.join(f'{i} ({s:.2f})' for i, s in near[:5])}",
                "val/train overlap: near-duplicates survived; rerun dedup_minhash.py, "
                "then pack_parallel.py")
    return it
