"""dedup_minhash.py's report and sweep tables.

The report (report/dedup_minhash_stats.{json,md}, report/removed.parquet) shows the
counts of every step of sections 3.4 to 3.6 (bucket pairs, candidates, rejected, verified,
clusters, removed), the largest clusters whole and the first removed documents, and the
histogram of the candidates' similarities with the threshold. A sweep's table gives, per
threshold, the documents removed, the clusters and the candidates rejected, and for
neighbouring thresholds the pairs whose fate changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from algorithms import minhash
from algorithms.arrays import from_numpy
from pipeline.filter_phase import Picked
from pipeline.shards import write_table
from pipeline.tables import human_bytes, markdown_table, pct, save_report, snippet, table
from pipeline.units import fetch_rows, shard_rows_of


SIM_BINS = np.round(np.linspace(0.0, 1.0, 51), 4)   # verified-similarity histogram, 0.02 wide
CLUSTER_EXAMPLE_CHARS = 2000                         # text kept per member of an example cluster
EXAMPLES = 5                                         # removed documents shown



class Shown(NamedTuple):
    """What the report shows whole: the largest clusters (kept index, size), three
    members of each (the kept one first), and the rows to read: those members, then the
    first removed documents."""
    clusters: list[tuple[int, int]]
    members: list[np.ndarray]
    rows: np.ndarray


def shown_rows(removed: np.ndarray, kept_of: np.ndarray) -> Shown:
    """The largest clusters and their first members (the kept one, then the smallest
    removed ones), from the removed documents (sorted) and the one each was merged into."""
    clusters_ = minhash.largest_clusters_of(kept_of)
    members_of = [np.r_[k, removed[kept_of == k][:2]] for k, _ in clusters_]
    rows = np.concatenate([*members_of, removed[:EXAMPLES]]).astype(np.int64)
    return Shown(clusters_, members_of, rows)


def report_picks(shown: Shown, removed, kept_of) -> dict[str, np.ndarray]:
    """The global rows whose id and text the report shows, picked by the filter tasks
    (dedup_exact.filter_phase), which read every row anyway."""
    return {"id": np.concatenate([removed, kept_of, shown.rows]), "text": shown.rows}


def removed_table(units, offsets, removed, kept_of, ids, kept_ids, sims,
                  sizes) -> pa.Table:
    """Rows of report/removed.parquet: each removed document, its cluster's kept one,
    their similarity, where both are in the input, and the cluster's size."""
    s, r = shard_rows_of(units, offsets, removed)
    ks, kr = shard_rows_of(units, offsets, kept_of)
    return pa.table({
        "id": ids, "kept_id": kept_ids, "similarity": from_numpy(sims, pa.float64()),
        "shard": s, "row": from_numpy(r, pa.int64()),
        "kept_shard": ks, "kept_row": from_numpy(kr, pa.int64()),
        "cluster_size": from_numpy(np.asarray(sizes, np.int64), pa.int64())})


def report_rows(units, offsets, sigs, removed, kept_of, sims, shown: Shown,
                staging: Path) -> dict:
    """What the report shows from the input: report/removed.parquet (every removed
    document, its cluster's kept one and their similarity) and the ids and texts of the
    largest clusters and of a few removed documents (report_picks)."""
    rep = staging / "report"
    rep.mkdir(exist_ok=True)
    id_of = Picked(staging, "id")
    ids, kept_ids = id_of.at(removed), id_of.at(kept_of)
    _, at_kept, size = np.unique(kept_of, return_inverse=True, return_counts=True)
    table = removed_table(units, offsets, removed, kept_of, ids, kept_ids, sims,
                          size[at_kept].astype(np.int64) + 1)
    write_table(rep / "removed.parquet", table)
    return shown_entries(sigs, shown, table.slice(0, EXAMPLES), staging,
                         minhash.cluster_size_counts(kept_of))


def shown_entries(sigs, shown: Shown, first_removed: pa.Table | None, staging: Path,
                  cluster_sizes: dict) -> dict:
    """The largest clusters (ids, texts, each member's similarity to the kept one) and the
    first removed documents (first_removed: their rows of removed.parquet), as the report
    shows them."""
    shown_ids = Picked(staging, "id").at(shown.rows).to_pylist()
    shown_text = Picked(staging, "text").at(shown.rows).to_pylist()
    lines, md_clusters, js_clusters = [], [], []
    at = 0
    for rank, ((k, sz), members) in enumerate(zip(shown.clusters, shown.members), 1):
        texts = shown_text[at:at + len(members)]
        mids = shown_ids[at:at + len(members)]
        at += len(members)
        msims = minhash.similarity(sigs.get(members), sigs.get([k] * len(members)))
        lines.append(f"cluster {rank}: {sz} documents, kept {mids[0]}")
        entry = {"kept_id": mids[0], "size": sz, "members": []}
        for i, (mid, t, sm) in enumerate(zip(mids, texts, msims)):
            tag = "kept   " if i == 0 else f"sim {sm:.2f}"
            lines.append(f"  {tag} {mid}: {snippet(t, 90)}")
            entry["members"].append({"id": mid, "similarity": round(float(sm), 4),
                                     "text": (t or "")[:CLUSTER_EXAMPLE_CHARS]})
        js_clusters.append(entry)
        md_clusters.append([mids[0], sz, snippet(texts[0], 100)])
    ex_text = shown_text[at:]
    first = first_removed.to_pydict() if first_removed is not None else {}
    examples = [{"id": first["id"][i], "kept_id": first["kept_id"][i],
                 "similarity": round(float(first["similarity"][i]), 4),
                 "text": snippet(ex_text[i])} for i in range(len(first.get("id", [])))]
    return {"lines": lines, "md_clusters": md_clusters, "js_clusters": js_clusters,
            "examples": examples, "cluster_sizes": cluster_sizes}


def similarity_histogram(sims: np.ndarray) -> list[int]:
    """How many candidates fall in each bin of SIM_BINS (none: an empty list). Counts add
    up: the histogram of several parts is the sum of theirs."""
    return np.histogram(np.clip(sims, 0, 1), SIM_BINS)[0].tolist() if len(sims) else []


def build_report(shown: dict, hist: list[int], counts, staging: Path, config: dict) -> str:
    """The stage's tables (text, report/dedup_minhash_stats.{json,md}) from the counts,
    the candidates' similarity_histogram and report_rows()' examples."""
    rep = staging / "report"
    lines, md_clusters, js_clusters = shown["lines"], shown["md_clusters"], shown["js_clusters"]
    examples = shown["examples"]
    c = counts
    rows = [["documents", c["docs_in"], c["docs_out"], pct(c["docs_out"], c["docs_in"])],
            ["bytes", human_bytes(c["bytes_in"]), human_bytes(c["bytes_out"]),
             pct(c["bytes_out"], c["bytes_in"])]]
    head = ["dedup_minhash", "before", "after", "kept"]
    # every pair of a bucket up to 64 documents, a star and a chain past it (not every
    # collision then), summed over the bands, repeats included
    lsh = [["bucket pairs, all bands", c["band_pairs"]],
           ["candidate pairs (unique)", c["candidates"]],
           [f"rejected: similarity < {config['threshold']}", c["candidates_rejected"]],
           ["verified duplicate pairs", c["candidates"] - c["candidates_rejected"]],
           ["clusters (2+ documents)", c["clusters"]],
           ["removed: near_duplicate", c["removed"]["near_duplicate"]],
           [f"texts shorter than {config['ngram']} chars (one shingle)", c["short_texts"]]]
    text = table(head, rows) + "\n\n" + table(["LSH " + f"b={config['bands']} r={config['rows']}", "count"], lsh)
    if lines:
        text += "\n\nlargest clusters:\n" + "\n".join(lines)
    md = "# dedup_minhash\n\n" + markdown_table(head, rows) + "\n\n" + markdown_table(["LSH", "count"], lsh)
    if md_clusters:
        md += "\n\n## Largest clusters\n\n" + markdown_table(["kept id", "documents", "text"], md_clusters)
    if examples:
        md += "\n\n## Removed examples\n\n" + markdown_table(
            ["removed id", "kept id", "similarity", "text"],
            [[e["id"], e["kept_id"], f"{e['similarity']:.3f}", e["text"]] for e in examples])
    save_report(rep, "dedup_minhash_stats", {
        **c, "config": config, "largest_clusters": js_clusters, "examples": examples,
        "cluster_sizes": shown["cluster_sizes"],
        "candidate_similarity": {"bins": SIM_BINS.tolist(), "counts": hist,
                                 "threshold": config["threshold"]}}, md)
    return text


def kept_line(kept: dict, n_docs: int) -> str:
    reuse = (f"signatures reused for {kept['tasks_reused']} of {kept['tasks']} tasks; "
             f"{kept.get('output_files_reused', 0)} output files reused unchanged")
    if "bytes" not in kept:
        return reuse + "; signatures not kept (--no-keep-signatures)"
    per_doc = kept["bytes"] / n_docs if n_docs else 0
    return (f"{reuse}; kept signatures and band hashes: {human_bytes(kept['bytes'])} "
            f"({per_doc:.0f} bytes per document) in signatures/, bands/, candidates/ and "
            f"removed/")


def sweep(n_docs: int, pairs: np.ndarray, sims: np.ndarray, thresholds: list[float],
          units, offsets, examples: int = 5) -> tuple[str, dict]:
    """Per threshold: removed documents, clusters, candidates rejected; for neighbouring
    thresholds, the pairs accepted by the lower and rejected by the higher one."""
    rows, data = [], {"docs_in": n_docs, "candidates": int(len(pairs)), "thresholds": [],
                      "changes": []}
    for t in thresholds:
        ok = minhash.accepted(sims, t)
        _, removed, kept_of = minhash.clusters(n_docs, pairs, ok)
        d = {"threshold": t, "removed": int(len(removed)),
             "clusters": int(len(np.unique(kept_of))), "rejected": int((~ok).sum())}
        data["thresholds"].append(d)
        rows.append([f"{t:g}", d["removed"], pct(d["removed"], n_docs), d["clusters"], d["rejected"]])
    lines = [f"sweep threshold ({n_docs:,} documents, {len(pairs):,} candidate pairs)",
             table(["threshold", "removed", "share", "clusters", "rejected"], rows), ""]
    for a, b in zip(thresholds, thresholds[1:]):
        between = np.flatnonzero(minhash.accepted(sims, a) & ~minhash.accepted(sims, b))
        order = between[np.argsort(-sims[between], kind="stable")][:examples]
        da = next(x for x in data["thresholds"] if x["threshold"] == a)
        db = next(x for x in data["thresholds"] if x["threshold"] == b)
        change = {"from": a, "to": b, "pairs": int(len(between)),
                  "documents": da["removed"] - db["removed"], "examples": []}
        lines.append(f"threshold {a:g} -> {b:g}: {change['documents']:,} documents change fate; "
                     f"{len(between):,} pairs merged at {a:g} but not at {b:g}")
        if len(order):
            ia, ib = pairs[order, 0], pairs[order, 1]
            ta, tb = fetch_rows(units, offsets, ia, "text"), fetch_rows(units, offsets, ib, "text")
            ida, idb = fetch_rows(units, offsets, ia, "id"), fetch_rows(units, offsets, ib, "id")
            for k in range(len(order)):
                e = {"id": ida[k], "other_id": idb[k], "similarity": round(float(sims[order[k]]), 4),
                     "text": snippet(ta[k], 300), "other_text": snippet(tb[k], 300)}
                change["examples"].append(e)
                lines.append(f"  sim {e['similarity']:.3f}: {e['id']} {snippet(ta[k], 60)!r}")
                lines.append(f"             {e['other_id']} {snippet(tb[k], 60)!r}")
        data["changes"].append(change)
        lines.append("")
    md = ["# dedup_minhash.py --sweep", "", markdown_table(
        ["threshold", "removed", "clusters", "rejected"],
        [[f"{d['threshold']:g}", d["removed"], d["clusters"], d["rejected"]]
         for d in data["thresholds"]]), ""]
    for ch in data["changes"]:
        md += [f"## threshold {ch['from']:g} -> {ch['to']:g}: {ch['documents']:,} documents "
               f"change fate ({ch['pairs']:,} pairs)", ""]
        if ch["examples"]:
            md += [markdown_table(["similarity", "id", "text", "other id", "other text"],
                                  [[f"{e['similarity']:.3f}", e["id"], snippet(e["text"], 120),
                                    e["other_id"], snippet(e["other_text"], 120)]
                                   for e in ch["examples"]]), ""]
    return "\n".join(lines).rstrip(), {**data, "markdown": "\n".join(md)}

