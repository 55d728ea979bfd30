"""Section 1 of the page, the funnel: documents and bytes after each stage, the removals
by reason, and whether each stage's counts add up.
"""

from __future__ import annotations

from pipeline.report.charts import funnel_chart, removals_chart
from pipeline.report.html import Html, badge, img, note, share, table
from pipeline.report.page import banners, section, section_status
from pipeline.report.state import FUNNEL, Run
from pipeline.tables import human_bytes


def funnel_data(run: Run) -> list[dict]:
    """Per funnel stage: documents and bytes after it, removals by reason, a count check."""
    out, prev = [], None
    for key in FUNNEL:
        st, c = run.states[key], run.counts(key)
        if key == "download_data":
            docs, nbytes = c.get("rows"), c.get("text_bytes")
            # (bad records are among the skipped, by reason: not counted a second time)
            removed = {f"skipped: {k}": v for k, v in (c.get("skipped") or {}).items()}
            docs_in = None
        else:
            docs, nbytes = c.get("docs_out"), c.get("bytes_out")
            removed, docs_in = dict(c.get("removed") or {}), c.get("docs_in")
        check = ""
        if st.ran and docs_in is not None and docs is not None:
            problems = []
            if docs_in - docs != sum(removed.values()):
                problems.append(f"{docs_in:,} in - {docs:,} out != {sum(removed.values()):,} "
                                f"removed")
            if prev is not None and prev.get("docs") is not None and prev["docs"] != docs_in:
                problems.append(f"reads {docs_in:,} but {prev['label']} wrote {prev['docs']:,}")
            check = "; ".join(problems) or "ok"
        row = {"key": key, "label": st.step.label, "state": st.state,
               "docs": docs if st.ran else None, "bytes": nbytes if st.ran else None,
               "removed": removed if st.ran else {}, "check": check,
               "tokens": c.get("tokens") if key == "pack_parallel" else None}
        out.append(row)
        prev = row if st.ran else None
    return out


def section_funnel(run: Run) -> Html:
    states = [run.states[k] for k in FUNNEL]
    status = section_status(states)
    body = [banners(run, states, compact=True)]
    rows = funnel_data(run)
    raw = next((r for r in rows if r["docs"] is not None), None)
    if raw is None:
        return section("funnel", "1. Funnel", status, "".join(body))
    body.append(img(funnel_chart([(r["label"], r["docs"], r["bytes"]) for r in rows]),
                    "documents and bytes after each stage"))
    run.figures += 1
    trs, attrs = [], []
    for r in rows:
        reasons = ", ".join(f"{k} {v:,}" for k, v in r["removed"].items() if v) or "—"
        removed = sum(r["removed"].values()) if r["docs"] is not None else None
        check = (badge("ok", "adds up") if r["check"] == "ok" else
                 badge("fail", r["check"]) if r["check"] else Html(""))
        trs.append([r["label"], badge(r["state"]), r["docs"],
                    share(r["docs"], raw["docs"]) if r["docs"] is not None else "—",
                    human_bytes(r["bytes"]) if r["bytes"] is not None else "—",
                    share(r["bytes"], raw["bytes"]) if r["bytes"] is not None else "—",
                    removed, reasons, check])
        attrs.append(f'data-stage="{r["key"]}" data-status="{r["state"]}"')
    body.append(table(["stage", "state", "documents", "of raw", "text bytes", "of raw",
                       "removed", "removed by reason", "counts"], trs, "funnel", attrs))
    chart = removals_chart([(r["key"], k, v) for r in rows for k, v in r["removed"].items()])
    if chart:
        run.figures += 1
        body.append(img(chart, "documents removed by reason"))
    pack = rows[-1]
    if pack["tokens"]:
        body.append(note(f"Packed: {pack['docs']:,} documents, {pack['tokens']:,} tokens. "
                         f"A document is counted by the first rule or stage that removes it."))
    return section("funnel", "1. Funnel", status, "".join(body))
