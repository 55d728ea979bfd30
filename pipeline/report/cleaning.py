"""Section 2 of the page, cleaning: each rule's threshold, reach and examples of what it
removed; the measured signals' histograms with the thresholds drawn; the language mix
before and after; the threshold sweep of `clean.py --sweep`.
"""

from __future__ import annotations

import numpy as np

from pipeline.report.charts import BLUE, GREY, RED, language_chart, near_threshold, signal_chart
from pipeline.report.html import (Html, badge, esc, example_pre, fmt, hfmt, img, note, share,
                                  table)
from pipeline.report.page import banners, section, section_status, subsection
from pipeline.report.state import CLEAN_DECONT, CLEAN_STATS, CLEAN_SWEEP, Run
from pipeline.tables import human_bytes

EXAMPLES = 5                 # example texts per cleaning rule


def value_text(v) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}={fmt(x)}" for k, x in v.items())
    if isinstance(v, list):   # a set of languages
        return ",".join(map(str, v))
    return fmt(v)


def rule_signal(stats: dict, name: str) -> tuple | None:
    """(histogram, config key, side it removes, log x axis, label) of a cleaning rule, from
    the declaration clean.py saved with its stats (algorithms/cleaning.py: Rule)."""
    for d in stats.get("rule_declarations") or []:
        if d.get("rule") == name:
            hist = "lang_conf" if d.get("language_rule") else d.get("signal")
            label = ("language-ID confidence (documents that reach it)"
                     if d.get("language_rule") else f"{d.get('signal')}: {d.get('description')}")
            return hist, d.get("key"), d.get("removes"), d.get("scale") == "log", label
    return None


def safe_rule_block(run: Run, rule: dict, stats: dict, config: dict, docs_in: int) -> Html:
    """rule_block, or one line for a rule that cannot be drawn (a rule file's odd
    declaration spoils its own block, not every rule's)."""
    try:
        return rule_block(run, rule, stats, config, docs_in)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, ArithmeticError) as e:
        msg = f"rule {rule.get('rule')}: could not be drawn ({type(e).__name__}: {e})"
        run.errors.append(msg)
        return Html(f'<div class="stale error">{esc(msg)}</div>')


def rule_block(run: Run, rule: dict, stats: dict, config: dict, docs_in: int) -> Html:
    name = str(rule.get("rule"))
    head = (f'<h4>{esc(name)} <span class="thr">{esc(rule.get("threshold", ""))}</span> '
            f'{badge("warn", "over warn share") if rule.get("warn") else ""}</h4>'
            f'<p class="figs">removed <b>{hfmt(rule.get("removed"))}</b> '
            f'({esc(share(rule.get("removed") or 0, docs_in))} of {docs_in:,} documents in)</p>')
    chart, caption = Html(""), Html("")
    sig = rule_signal(stats, name)
    hist = (stats.get("histograms") or {}).get(sig[0]) if sig else None
    if sig and hist and hist.get("bins") and hist.get("counts"):
        hname, cfg_key, removes, log, xlabel = sig
        t = per_lang = config.get(cfg_key)
        t = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None
        by = hist.get("by_outcome") or {}
        layers = None
        if by:   # stacked: removed by this rule on top of removed by others on top of kept
            others = np.sum([by[k] for k in by if k not in (name, "kept")] or [[0] * len(hist["counts"])], axis=0)
            layers = [(f"removed by {name}", by.get(name, [0] * len(others)), RED),
                      ("removed by another rule", others.tolist(), GREY),
                      ("kept", by.get("kept", [0] * len(others)), BLUE)]
        chart = img(signal_chart(hist["bins"], hist["counts"], t, removes, log, xlabel,
                                 f"{name}: {xlabel}", layers), f"histogram of {hname}")
        run.figures += 1
        if t is not None:
            n = near_threshold(hist["bins"], by.get(name, hist["counts"]) if by else hist["counts"],
                               t, removes, log)
            k = near_threshold(hist["bins"], by["kept"], t, removes, log) if by.get("kept") else None
            lo, hi = n["window"]
            if k is not None:
                other = n["total"] - n["removed_side"] - n["straddling"]
                if n["total"] == 0:
                    where = f"none removed by {esc(name)} at {t:g}"
                elif not other and not n["straddling"]:
                    where = f"all on the removed side of {t:g} (red)"
                else:
                    where = ", ".join(
                        [f"{n['removed_side']:,} on the removed side of {t:g} (red)"]
                        + ([f"{n['straddling']:,} in the bin holding {t:g}"]
                           if n["straddling"] else [])
                        + ([f"{other:,} not, removed on another ground than this value "
                            "(for lang: a language not asked for)"] if other else []))
                held = (f" ({k['straddling']:,} kept in the bin holding {t:g})"
                        if k["straddling"] else "")
                caption = note(Html(
                    f"{n['total']:,} document{'s' if n['total'] != 1 else ''} removed by "
                    f"{esc(name)}: {where}; grey: removed by another rule. Near the threshold "
                    f"({lo:g} to {hi:g}): <b>{n['near_removed']:,}</b> just removed by it, "
                    f"<b>{k['near_kept']:,}</b> kept just on the other side{held}."))
            else:
                caption = note(Html(
                    f"{n['total']:,} documents measured; {n['removed_side']:,} on the removed side "
                    f"of {t:g} (shaded; some are counted by an earlier rule). Near the threshold "
                    f"({lo:g} to {hi:g}): <b>{n['near_removed']:,}</b> just removed, "
                    f"<b>{n['near_kept']:,}</b> just kept"
                    + (f"; {n['straddling']:,} in the bin holding {t:g}" if n["straddling"] else "")
                    + "."))
        elif isinstance(per_lang, dict):   # one histogram, several thresholds
            caption = note(f"A threshold per language ({rule.get('threshold', '')}): the "
                           "histogram holds every language, so no one threshold line is drawn; "
                           "the table above counts each document against its own language's.")
    elif sig:
        caption = note(f"clean_stats.json has no histogram '{sig[0]}': rerun clean.py "
                       f"with this version to get it.")
    else:
        caption = note("clean_stats.json does not describe this rule (no rule_declarations): "
                       "rerun clean.py with this version to get its histogram.")
    exs = run.files.jsonl(f"cleaned/report/removed_{name}.jsonl", EXAMPLES)
    if exs:
        ex_html = "".join(f'<div class="ex"><div class="doc-head">{esc(e.get("id", "?"))} · '
                          f'{esc(value_text(e.get("value")))}</div>'
                          f'{example_pre(e.get("text"), config.get("example_chars"))}</div>'
                          for e in exs)
    else:
        ex_html = note(f"no examples (report/removed_{name}.jsonl is absent or empty)")
    return Html(f'<div class="rule" data-rule="{esc(name)}">{head}<div class="grid2">'
                f'<div>{chart}{caption}</div><div class="examples">{ex_html}</div></div></div>')


def clean_sweep(run: Run) -> Html:
    sw = run.files.json(CLEAN_SWEEP)
    if not sw:
        return note(Html("No sweep: <code>python clean.py --sweep min_chars=100,200,600</code> "
                         "shows what other thresholds would remove (it writes "
                         "report/sweep.json and changes nothing else)."))
    out = []
    raw = run.m("download_data") or {}
    dep = ((sw.get("signals") or {}).get("depends_on") or {}).get("input_fingerprint")
    if dep and raw.get("output_fingerprint") and dep != raw["output_fingerprint"]:
        out.append(Html('<div class="stale">This sweep was run on an earlier raw/: rerun '
                        'clean.py --sweep to refresh it.</div>'))
    base, docs_in = sw.get("base") or {}, sw.get("docs_in") or 0
    now = ((run.m("clean") or {}).get("config") or {}) if run.states["clean"].ran else base
    saved = now.get("example_chars")   # the sweep saves its examples as the run does
    for s in sw.get("sweeps") or []:
        param, values = s.get("param"), s.get("values") or []
        # this sweep's own setting may differ (that is the loop: sweep, then rerun with a
        # value chosen); any other one, another sweep's included, makes every row a
        # what-if beside settings no longer in place
        moved = settings_moved(base, now, str(param))
        if moved:   # clean ran again with other settings after the sweep
            out.append(Html(f'<div class="stale">This sweep was run with other settings than '
                            f'the output in place ({esc(moved[0])} {esc(value_text(base[moved[0]]))} '
                            f'then, {esc(value_text(now[moved[0]]))} now): its rows of {esc(param)} are what each '
                            f'value would remove beside those settings; rerun clean.py --sweep '
                            f'to refresh it.</div>'))
        current = swept_value(now, str(param))
        rules = list(dict.fromkeys(k for v in values for k in (v.get("removed") or {})))
        rows, attrs = [], []
        for v in values:
            cur = not moved and current is not None and current == v.get("value")
            rows.append([Html(f"{esc(value_text(v.get('value')))}{' (this run)' if cur else ''}")]
                        + [(v.get("removed") or {}).get(r, 0) for r in rules]
                        + [v.get("docs_out"), share(v.get("docs_out") or 0, docs_in),
                           human_bytes(v.get("bytes_out") or 0)])
            attrs.append('class="current"' if cur else "")
        out.append(Html(f"<h4>sweep of {esc(param)} ({docs_in:,} documents; the other "
                        f"thresholds as in {'the run the sweep was made beside' if moved else 'this run'})</h4>"
                        + table([param] + rules + ["kept", "kept share", "bytes kept"],
                                rows, "", attrs)))
        for ch in s.get("changes") or []:
            exs = "".join(
                f'<div class="ex"><div class="doc-head">{esc(e.get("id"))}: removed at '
                f'{esc(e.get("removed_by"))} by {esc(e.get("rule"))} '
                f'({esc(value_text(e.get("value")))}), kept at {esc(e.get("kept_by"))}</div>'
                f'{example_pre(e.get("text"), saved)}</div>'
                for e in (ch.get("examples") or [])[:3])
            out.append(Html(f'<p class="figs">{esc(param)} {esc(ch.get("from"))} → '
                            f'{esc(ch.get("to"))}: <b>{hfmt(ch.get("documents"))}</b> documents '
                            f'change fate</p><div class="grid3">{exs}</div>'))
    return Html("".join(out))


def settings_moved(base: dict, now: dict, param: str) -> list[str]:
    """The settings other than `param` ("min_chars", or one language's "min_chars@zh")
    whose value in place (now) differs from the one a sweep was made beside (base)."""
    key, _, lang = param.partition("@")
    out = []
    for k in base:
        if k not in now:
            continue
        a, b = base[k], now[k]
        if k == key:
            if not lang:
                continue
            a = {x: v for x, v in (a if isinstance(a, dict) else {"*": a}).items() if x != lang}
            b = {x: v for x, v in (b if isinstance(b, dict) else {"*": b}).items() if x != lang}
        if a != b:
            out.append(k)
    return out


def swept_value(config: dict, param: str):
    """The value a config gives a swept parameter: config["min_chars"], or for
    "min_chars@zh" its Chinese threshold (or the one for every language); None if none."""
    key, _, lang = param.partition("@")
    v = config.get(key)
    if lang and isinstance(v, dict):
        return v.get(lang, v.get("*"))
    return v


def marked(context: dict) -> Html:
    """A document's text around a match, the matched n-grams' characters in <mark>."""
    text, out, last = context["text"], [], 0
    for a, b in context["marks"]:
        out += [esc(text[last:a]), Html("<mark>"), esc(text[a:b]), Html("</mark>")]
        last = b
    out.append(esc(text[last:]))
    return Html(("… " if context.get("cut_before") else "") + "".join(out)
                + (" …" if context.get("cut_after") else ""))


def decontamination(d: dict) -> Html:
    """Per evaluation set: its items, those found, the documents flagged; then examples,
    each with its item and the matched n-grams marked in context."""
    rows = [[name, s["items"], s["too_short"], s["found"], s["documents"]]
            for name, s in d["sets"].items()]
    body = [note(f"Word {d['n']}-grams of the evaluation items (a Chinese character is a "
                 f"word), {fmt(d['ngrams'])} in the index: a document with more than "
                 f"{esc(d['threshold'])} of them is removed; {fmt(d['removed_first'])} were "
                 "counted under this rule, after the rules before it."),
            table(["evaluation set", "items", f"items under {d['n']} words (never found)",
                   "items found", "documents flagged"], rows)]
    if d.get("note"):
        body.append(note(d["note"]))
    for e in d["examples"][:EXAMPLES]:
        body.append(Html(
            f'<div class="example"><p><b>{esc(e["id"])}</b>: {esc(e["set"])} item '
            f'{esc(e["item"])}, {esc(e["matched_ngrams"])} n-grams; question: '
            f'<i>{esc(e["question"])}</i> answer: <i>{esc(e["answer"])}</i></p>'
            f'<pre class="doc">{marked(e["context"])}</pre></div>'))
    return Html("".join(body))


def section_cleaning(run: Run) -> Html:
    st = run.states["clean"]
    body = [banners(run, [st])]
    stats = run.files.json(CLEAN_STATS) if st.ran else None
    if st.ran and stats is None:
        gone = "is unreadable" if (run.data / CLEAN_STATS).exists() else "is missing"
        body.append(Html(f'<div class="missing">{esc(CLEAN_STATS)} {gone}: rerun '
                         f'<code>{esc(st.step.command(run.data))}</code></div>'))
    if stats is not None:
        config = stats.get("config") or (st.data or {}).get("config") or {}
        rules = stats.get("rules") or (st.data or {}).get("rules") or []
        docs_in = int(stats.get("docs_in") or run.counts("clean").get("docs_in") or 0)
        docs_out = stats.get("docs_out")
        body.append(note(f"{docs_in:,} documents in, {fmt(docs_out)} kept "
                         f"({share(docs_out or 0, docs_in)}). "
                         f"Accounting: {stats.get('accounting', '?')}."))
        # clean.py --report-all: what each rule would remove on its own, as its table has
        alone = any("alone" in r for r in rules)
        warn = badge("warn", f"> {stats.get('warn_share', '?')}")
        body.append(table(["rule", "threshold", "removed", "share", "flag"]
                          + (["alone", "alone share", "alone flag"] if alone else []),
                          [[r.get("rule"), r.get("threshold"), r.get("removed"),
                            share(r.get("removed") or 0, docs_in),
                            warn if r.get("warn") else ""]
                           + ([r.get("alone"), share(r["alone"], docs_in)
                               if isinstance(r.get("alone"), int) else "—",
                               warn if r.get("alone_warn") else ""] if alone else [])
                           for r in rules], "rules"))
        if alone:
            body.append(note("alone: the documents a rule would remove on its own, whatever "
                             "the other rules say (clean.py --report-all; a document can "
                             "count under several rules there)."))
        body.append(Html("".join(safe_rule_block(run, r, stats, config, docs_in)
                                 for r in rules)))
        langs = stats.get("languages") or {}
        reached, kept = langs.get("reached_language_id") or {}, langs.get("kept") or {}
        lang_rows = [[k, v, kept.get(k, 0), v - kept.get(k, 0)]
                     for k, v in sorted(reached.items(), key=lambda kv: (-kv[1], kv[0]))]
        chart = language_chart(reached, kept)
        run.figures += bool(chart)
        body.append(subsection("Language mix before and after cleaning", Html(
            f'<div class="grid2"><div>{img(chart, "language mix")}</div><div>'
            + table(["language", "reached language ID", "kept", "removed"], lang_rows[:20])
            + note(f"{fmt(langs.get('removed_before_language_id'))} documents were removed by "
                   f"an earlier rule before language ID; allowed languages: "
                   f"{', '.join(map(str, config.get('languages') or []))}.")
            + "</div></div>"), "languages"))
        decont = run.files.json(CLEAN_DECONT)
        if decont is not None:
            body.append(subsection("Decontamination", decontamination(decont), "decontamination"))
        body.append(subsection("Threshold sweep", clean_sweep(run), "clean-sweep"))
    return section("cleaning", "2. Cleaning", section_status([st]), "".join(body))
