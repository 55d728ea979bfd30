"""Section 3 of the page, deduplication: exact-duplicate groups; MinHash clusters,
verified candidate similarities and the LSH S-curve around the threshold; the largest
clusters side by side with their differences marked; the threshold sweep.
"""

from __future__ import annotations

from pipeline.report.charts import s_curve_chart, similarity_chart, sizes_chart
from pipeline.report.diff import side_by_side
from pipeline.report.html import Html, esc, fmt, hfmt, img, note, share, show_text, table
from pipeline.report.page import banners, missing_part, section, section_status, subsection
from pipeline.report.state import EXACT_STATS, MINHASH_STATS, MINHASH_SWEEP, Run

CLUSTERS = 3                 # largest near-duplicate clusters shown side by side
PAIRS_PER_CLUSTER = 2        # removed members compared with the kept one, per cluster


def exact_part(run: Run) -> Html:
    st = run.states["dedup_exact"]
    if not st.ran:
        return Html("")
    s = run.files.json(EXACT_STATS)
    if s is None:
        return missing_part(run, EXACT_STATS, st.step)
    c = run.counts("dedup_exact")
    out = [note(f"{fmt(s.get('docs_in'))} documents in, {fmt(s.get('docs_out'))} kept; "
                f"{fmt((s.get('removed') or {}).get('exact_duplicate'))} exact copies removed "
                f"in {fmt(s.get('dup_groups', c.get('dup_groups')))} groups "
                f"(normalised: {(st.data.get('config') or {}).get('normalise', '?')}).")]
    chart = sizes_chart(s.get("group_sizes") or {}, "copies in a group (kept one included)",
                        "exact-duplicate group sizes")
    run.figures += bool(chart)
    groups = s.get("largest_groups") or []
    out.append(Html(f'<div class="grid2"><div>{img(chart, "exact duplicate group sizes")}'
                    f'</div><div>' + table(["kept id", "copies", "text"],
                                           [[g.get("kept_id"), g.get("copies"),
                                             Html(show_text(g.get("text"), 160))]
                                            for g in groups[:5]]) + "</div></div>"))
    return subsection("Exact duplicates (dedup_exact.py)", Html("".join(out)), "dedup-exact")


def minhash_part(run: Run) -> Html:
    st = run.states["dedup_minhash"]
    if not st.ran:
        return Html("")
    s = run.files.json(MINHASH_STATS)
    if s is None:
        return missing_part(run, MINHASH_STATS, st.step)
    cfg = s.get("config") or st.data.get("config") or {}
    bands, rows_, thr = cfg.get("bands"), cfg.get("rows"), cfg.get("threshold")
    out = [table(["documents in", "kept", "bucket pairs", "candidate pairs", "rejected",
                  "clusters", "near-duplicates removed"],
                 [[s.get("docs_in"), s.get("docs_out"), s.get("band_pairs"),
                   s.get("candidates"), s.get("candidates_rejected"), s.get("clusters"),
                   (s.get("removed") or {}).get("near_duplicate")]]),
           note(f"{cfg.get('num_perm', '?')} hash functions over character "
                f"{cfg.get('ngram', '?')}-grams, b = {bands} bands × r = {rows_} rows; a "
                f"candidate is a duplicate when its signatures agree on ≥ {thr} of the values.")]
    charts = []
    cs = sizes_chart(s.get("cluster_sizes") or {}, "documents in a cluster (kept one included)",
                     "MinHash cluster sizes")
    if cs:
        charts.append(img(cs, "MinHash cluster sizes"))
    sim = s.get("candidate_similarity") or {}
    if sim.get("counts") and sim.get("bins"):
        t = float(sim.get("threshold", thr))
        rej = s.get("candidates_rejected")
        charts.append(img(similarity_chart(sim["bins"], sim["counts"], t,
                                           rej if isinstance(rej, int) else None),
                          "histogram of candidate similarities"))
    if isinstance(bands, int) and isinstance(rows_, int) and thr is not None:
        fig, p_t, s_half = s_curve_chart(bands, rows_, float(thr))
        charts.append(Html(img(fig, "LSH S-curve") + note(
            f"A pair at the threshold {thr:g} becomes a candidate with probability {p_t:.3f}; "
            f"pairs above s = {s_half:.2f} are found more often than not.")))
    run.figures += len(charts)
    out.append(Html('<div class="grid2">' + "".join(f"<div>{c}</div>" for c in charts) + "</div>"))
    clusters = s.get("largest_clusters") or []
    if clusters:
        blocks = []
        for c in clusters[:CLUSTERS]:
            members = c.get("members") or []
            if not members:
                continue
            kept = members[0]
            pairs = []
            for m in members[1:1 + PAIRS_PER_CLUSTER]:
                pairs.append(side_by_side(
                    f"kept {esc(kept.get('id'))}", kept.get("text"),
                    f"removed {esc(m.get('id'))} · similarity {hfmt(m.get('similarity'))}",
                    m.get("text")))
            blocks.append(Html(f'<div class="cluster"><p class="figs">cluster of '
                               f'<b>{hfmt(c.get("size"))}</b> documents, kept '
                               f'{esc(c.get("kept_id"))}</p>{"".join(pairs)}</div>'))
        out.append(subsection("Largest clusters, side by side", Html("".join(blocks)),
                              "clusters"))
    sw = run.files.json(MINHASH_SWEEP)
    if sw:
        rows, attrs, stale = [], [], ""
        dep = sw.get("depends_on") if isinstance(sw.get("depends_on"), dict) else {}
        src = (run.m("dedup_exact") or {}).get("output_fingerprint")
        if dep.get("input_fingerprint") and src and dep["input_fingerprint"] != src:
            stale = "on an earlier dedup_exact/ output"
        else:
            diff = [k for k in ("ngram", "num_perm", "seed", "bands", "rows")
                    if k in dep and k in cfg and dep[k] != cfg[k]]
            if diff:
                stale = f"with {diff[0]} {dep[diff[0]]} (this run: {cfg[diff[0]]})"
        if stale:
            rows_note = Html(f'<div class="stale">This sweep was run {esc(stale)}: its '
                             f'figures are not this run\'s; rerun dedup_minhash.py --sweep to '
                             f'refresh it.</div>')
        for t in sw.get("thresholds") or []:
            cur = not stale and t.get("threshold") == thr
            rows.append([Html(f"{esc(t.get('threshold'))}{' (this run)' if cur else ''}"),
                         t.get("removed"), share(t.get("removed") or 0, sw.get("docs_in") or 0),
                         t.get("clusters"), t.get("rejected")])
            attrs.append('class="current"' if cur else "")
        body = ([rows_note] if stale else []) + [
            table(["threshold", "removed", "share", "clusters", "rejected candidates"],
                  rows, "", attrs)]
        for ch in sw.get("changes") or []:
            pairs = ch.get("pairs")
            body.append(Html(f'<p class="figs">threshold {esc(ch.get("from"))} → '
                             f'{esc(ch.get("to"))}: <b>{hfmt(ch.get("documents"))}</b> documents '
                             f'change fate ({hfmt(pairs)} pair{"" if pairs == 1 else "s"})</p>'))
            for e in (ch.get("examples") or [])[:2]:
                body.append(side_by_side(esc(e.get("id")), e.get("text"),
                                         f"{esc(e.get('other_id'))} · similarity "
                                         f"{hfmt(e.get('similarity'))}", e.get("other_text")))
        out.append(subsection("Threshold sweep (dedup_minhash.py --sweep)", Html("".join(body)),
                              "minhash-sweep"))
    return subsection("Near duplicates (dedup_minhash.py)", Html("".join(out)), "dedup-minhash")


def section_dedup(run: Run) -> Html:
    states = [run.states["dedup_exact"], run.states["dedup_minhash"]]
    body = banners(run, states) + exact_part(run) + minhash_part(run)
    return section("dedup", "3. Deduplication", section_status(states), body)
