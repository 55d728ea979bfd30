"""The page's header and its list of inputs: the run summed up (documents and bytes in and
out, tokens, the checklist), each step's state, time, memory and settings, the next thing
to do, the table of contents; and at the end, the files the page was drawn from.
"""

from __future__ import annotations

import re
from datetime import datetime

from pipeline.manifest import display_path, source_name
from pipeline.report.html import Html, badge, esc, fmt, note, share, table
from pipeline.report.page import section, section_status
from pipeline.report.state import (FUNNEL, STAGES, TOKENIZER_MANIFEST, TOOLS, Run,
                                   packed_tokenizer, unfinished_run)
from pipeline.tables import human_bytes

def _count(v) -> int | float | None:
    """A count read from a manifest, or None when it is not a number (edited by hand)."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else None


def run_summary(run: Run) -> dict:
    raw, pack = run.counts("download_data"), run.counts("pack_parallel")
    ran = [s for s in STAGES if run.states[s.key].ran]
    stale = [s for s in STAGES + TOOLS if run.states[s.key].state in ("stale", "unreadable")]
    last = next((run.counts(k) for k in reversed(FUNNEL[1:]) if run.states[k].ran), {})
    ver = run.m("verify") or {}
    items = ver.get("items") if isinstance(ver.get("items"), list) else []
    items = [i for i in items if isinstance(i, dict)]
    train, val = (pack.get(k) if isinstance(pack.get(k), dict) else {} for k in ("train", "val"))
    docs_raw, bytes_raw = _count(raw.get("rows")), _count(raw.get("text_bytes"))
    return {"stages_run": len(ran), "stages": len(STAGES), "stale": [s.key for s in stale],
            "docs_raw": docs_raw if bytes_raw is not None else None, "bytes_raw": bytes_raw,
            "docs_now": _count(last.get("docs_out")), "bytes_now": _count(last.get("bytes_out")),
            "tokens": _count(pack.get("tokens")), "train_tokens": _count(train.get("tokens")),
            "val_tokens": _count(val.get("tokens")),
            "passed": sum(bool(i.get("ok")) for i in items) if items else None,
            "items": len(items) if items else None,
            "dataset": ((run.m("download_data") or {}).get("config") or {}).get("dataset")}


def summary_line(s: dict, size: int) -> str:
    parts = [f"{s['stages_run']} of {s['stages']} stages run"
             + (f", stale: {', '.join(s['stale'])}" if s["stale"] else ", none stale")]
    if s["docs_raw"] is not None:
        now = s["docs_now"] if s["docs_now"] is not None else s["docs_raw"]
        parts.append(f"{s['docs_raw']:,} -> {fmt(now)} documents")
    if s["tokens"] is not None:
        parts.append(f"{s['tokens']:,} tokens")
    if s["items"]:
        parts.append(f"checklist {s['passed']}/{s['items']} PASS")
    parts.append(f"{size / 1e6:.2f} MB")
    return "report: " + "; ".join(parts)


CONFIG_NOTES = {   # the settings a reviewer checks first, per step
    "download_data": ["dataset"],
    "clean": ["rules", "languages"],   # and every rule's threshold (the manifest names them)
    "dedup_exact": ["normalise"],
    "dedup_minhash": ["ngram", "num_perm", "bands", "rows", "threshold"],
    "train_tokenizer": ["vocab_size", "sample_ratio", "seed"],
    "pack_parallel": ["val_ratio", "seed", "dtype"],
}


def config_note(key: str, manifest: dict) -> str:
    cfg = manifest.get("config") or {}
    parts = []
    for k in CONFIG_NOTES.get(key, []) + list(manifest.get("rule_keys") or []):
        if k in cfg and cfg[k] is not None:
            v = cfg[k]
            parts.append(f"{k} {','.join(map(str, v)) if isinstance(v, list) else v}")
    src = cfg.get("source") if isinstance(cfg.get("source"), dict) else {}
    if key == "download_data" and src.get("hub") and src.get("commit"):   # which version
        parts.append(f"{src['hub']} at commit {src['commit'][:12]}")
    elif key == "download_data" and cfg.get("dataset") is None and source_name(cfg):
        parts.append(source_name(cfg))   # --input: the local files the run read
    return "; ".join(parts)


def packed_elsewhere(run: Run) -> bool:
    """pack read a tokenizer from outside the data folder (--tokenizer elsewhere)."""
    used, _ = packed_tokenizer(run.data, run.m("pack_parallel"))
    return used is not None and used != (run.data / TOKENIZER_MANIFEST).resolve()


def next_step(run: Run) -> Html:
    """The first thing to do: rerun the earliest stale step, or run the first missing one."""
    order = STAGES[:5] + [TOOLS[0], STAGES[5], TOOLS[1]]
    stale = next((s for s in order if run.states[s.key].state in ("stale", "unreadable")), None)
    ran = [i for i, s in enumerate(order) if run.states[s.key].ran]
    gone = next((s for i, s in enumerate(order[:max(ran)]) if not run.states[s.key].ran
                 and s in STAGES and not (s.key == "train_tokenizer" and packed_elsewhere(run))),
                None) if ran else None
    if gone and (stale is None or order.index(gone) < order.index(stale)):
        return Html(f'<div class="missing next"><b>Next:</b> the output of {esc(gone.script)} '
                    f'is gone while steps below it ran (what they wrote is still usable as '
                    f'it is, and is shown below); to check the whole run again, run '
                    f'<code>{esc(gone.command(run.data))}</code> and the steps below it.</div>')
    if stale:
        below = " and the steps below it" if stale is not order[-1] else ""
        return Html(f'<div class="stale next"><b>Next:</b> rerun <code>'
                    f'{esc(stale.command(run.data))}</code>{below} '
                    f'({esc(run.states[stale.key].message)}).</div>')
    missing = next((s for s in order if not run.states[s.key].ran), None)
    # a stage that kept no document: the next one would refuse its empty input
    empty = next((s for s in order[:order.index(missing)] if missing and s.key in FUNNEL
                  and run.counts(s.key).get("rows" if s.key == "download_data" else
                                            "docs_out", 1) == 0), None) if missing else None
    if empty:
        return Html(f'<div class="missing next"><b>Next:</b> {esc(empty.script)} kept no '
                    f'document, so nothing after it can run: see its section, loosen its '
                    f'settings and rerun <code>{esc(empty.command(run.data))}</code>.</div>')
    if missing:
        return Html(f'<div class="missing next"><b>Next:</b> run <code>'
                    f'{esc(missing.command(run.data))}</code></div>')
    return Html("")


def card(title: str, value: str, sub: str = "", cls: str = "") -> str:
    return (f'<div class="card {cls}"><div class="ct">{esc(title)}</div>'
            f'<div class="cv">{esc(value)}</div><div class="cs">{esc(sub)}</div></div>')


def header(run: Run, s: dict, toc: list[tuple[str, str, str]]) -> Html:
    cards = []
    if s["docs_raw"] is not None:
        now = s["docs_now"] if s["docs_now"] is not None else s["docs_raw"]
        cards.append(card("documents", f"{s['docs_raw']:,} → {now:,}",
                          f"{share(now, s['docs_raw'])} kept"))
        bnow = s["bytes_now"] if s["bytes_now"] is not None else s["bytes_raw"]
        cards.append(card("text", f"{human_bytes(s['bytes_raw'])} → {human_bytes(bnow)}",
                          f"{share(bnow, s['bytes_raw'])} kept"))
    if s["tokens"] is not None:
        cards.append(card("tokens packed", f"{s['tokens']:,}",
                          f"train {fmt(s['train_tokens'])} · val {fmt(s['val_tokens'])}"))
    if s["items"]:
        ok = s["passed"] == s["items"]
        cards.append(card("checklist", f"{s['passed']} / {s['items']} PASS",
                          "verify.py" + ("" if run.states["verify"].state == "ok" else
                                         f" ({run.states['verify'].state})"),
                          "good" if ok else "bad"))
    cards.append(card("stages", f"{s['stages_run']} / {s['stages']} run",
                      f"{len(s['stale'])} stale" if s["stale"] else "none stale",
                      "bad" if s["stale"] else ("good" if s["stages_run"] == s["stages"] else "")))
    rows, attrs = [], []
    for step in STAGES + TOOLS:
        st = run.states[step.key]
        d = st.data or {}
        c = d.get("counts") or {}
        tm = (d.get("timings") or {}).get("total")
        rss = (d.get("resources") or {}).get("driver_peak_rss_mb")
        docs = (f"{fmt(c.get('docs_in'))} → {fmt(c.get('docs_out'))}" if "docs_out" in c
                else f"{fmt(c.get('rows'))}" if "rows" in c
                else f"{fmt(c.get('docs_in'))} read" if "docs_in" in c else "")
        if step.key == "verify" and st.ran:
            its = [i for i in d.get("items") or [] if isinstance(i, dict)]
            docs = f"checklist {sum(bool(i.get('ok')) for i in its)}/{len(its)} PASS"
        elif step.key == "compare_tokenizers" and st.ran:
            docs = f"{len(d.get('results') or [])} tokenizers measured"
        when = datetime.fromtimestamp(st.mtime).strftime("%Y-%m-%d %H:%M") if st.mtime else ""
        what = (Html(f"<code>{esc(step.command(run.data))}</code>") if st.state == "missing"
                else st.message or config_note(step.key, d))
        left = unfinished_run(run.data, step)
        if left is not None:   # what is shown is the last committed run's, not that one's
            what = Html(f"{what if isinstance(what, Html) else esc(what)}<br><b>a run that "
                        f"has not finished</b> (stopped, or still running) keeps its work in "
                        f"<code>{esc(display_path(left))}</code>: the same command resumes "
                        "it; what this page shows is the last finished run")
        rows.append([step.label, step.script, badge(st.state), docs,
                     f"{tm:,.1f} s" if isinstance(tm, (int, float)) else "",
                     f"{rss:,.0f} MB" if isinstance(rss, (int, float)) else "", when, what])
        attrs.append(f'data-stage="{step.key}" data-status="{st.state}"')
    toc_html = "".join(f'<li><a href="#{sid}">{esc(title)}</a> '
                       f'{badge(status) if status else ""}</li>' for sid, title, status in toc)
    gen = datetime.now().strftime("%Y-%m-%d %H:%M")
    dataset = f" · dataset {esc(s['dataset'])}" if s.get("dataset") else ""
    return Html(
        f'<header id="summary"><h1>Data pipeline report</h1>'
        f'<p class="sub">data folder <code>{esc(display_path(run.data))}</code>'
        f'{dataset}'
        f' · generated {gen} by report.py</p>'
        f'<div class="cards">{"".join(cards)}</div>{next_step(run)}'
        f'<nav class="toc"><h2>Contents</h2><ol>{toc_html}</ol></nav>'
        f'<h2>Stages</h2>'
        + table(["stage", "script", "state", "documents", "time", "peak RSS", "written",
                 "note"], rows, "stages", attrs)
        + '<p class="note">ok: its manifest checks out against the stages above it. stale: '
          'an input was rewritten after it ran (rerun it and the stages below it). '
          'missing: not run yet.</p></header>')


def section_sources(run: Run, seconds: float) -> Html:
    rows = [[rel, human_bytes(n)] for rel, n in sorted(run.files.read.items())]
    total = sum(run.files.read.values())
    probs = "".join(f'<div class="stale">{esc(p)}</div>' for p in run.files.problems + run.errors)
    return section("sources", "About this page", "ok", show_status=False, body=Html(
        probs + note(f"Drawn from {len(rows)} manifests and report files ({human_bytes(total)}) "
                     f"in {seconds:.1f} s, {run.figures} figures. No corpus shard, signals/ or "
                     f"signatures/ file is read: the histograms are counts the stages saved, "
                     f"so this page costs the same on 30 GB as on the sample.")
        + "<details><summary>Files read</summary>" + table(["file", "size"], rows)
        + "</details>"))


SECTION_STEPS = {"funnel": FUNNEL, "cleaning": ["clean"],
                 "dedup": ["dedup_exact", "dedup_minhash"],
                 "tokenizer": ["train_tokenizer", "compare_tokenizers"],
                 "pack": ["pack_parallel", "verify"]}


def contents(run: Run, sections: list, parts: list[str]) -> list[tuple[str, str, str]]:
    """The table of contents: each section with its own badge (a section may show a stale
    step's figures, or fail)."""
    return [(sid, title, m.group(1) if (m := re.match(r'<section id="[^"]*" data-status="(\w+)"',
                                                       part)) else
             section_status([run.states[k] for k in SECTION_STEPS[sid]]))
            for (sid, title, _), part in zip(sections, parts)]
