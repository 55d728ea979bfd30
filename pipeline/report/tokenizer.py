"""Section 4 of the page, the tokenizer: its compression against GPT-2, a Llama-style 32k
vocabulary and cl100k (compare_tokenizers.py), its training sample, and the tokens per
packed document.
"""

from __future__ import annotations

from pipeline.report.charts import compression_chart, tokens_chart
from pipeline.report.html import Html, esc, fmt, img, note, table
from pipeline.report.page import banners, missing_part, section, section_status, subsection
from pipeline.report.state import PACK_STATS, TOOLS, Run
from pipeline.tables import human_bytes


def section_tokenizer(run: Run) -> Html:
    tok, cmp_ = run.states["train_tokenizer"], run.states["compare_tokenizers"]
    pack = run.states["pack_parallel"]
    body = [banners(run, [tok])]
    if tok.ran:
        m = tok.data
        comp = cmp_.data
        if comp and comp.get("results"):
            if cmp_.state != "ok":
                body.append(banners(run, [cmp_]))
            res = comp["results"]
            pub = comp.get("published_cc100_chars_per_token") or {}
            chart = compression_chart(res, pub)
            run.figures += bool(chart)
            rows = [[r.get("tokenizer"), r.get("vocab"),
                     (r.get("en") or {}).get("chars_per_token"),
                     (r.get("en") or {}).get("bytes_per_token"),
                     (r.get("zh") or {}).get("chars_per_token"),
                     (r.get("zh") or {}).get("bytes_per_token"),
                     (pub.get(r.get("tokenizer")) or {}).get("en"),
                     (pub.get(r.get("tokenizer")) or {}).get("zh")] for r in res]
            rows += [[k, None, None, None, None, None, v.get("en"), v.get("zh")]
                     for k, v in pub.items() if k not in {r.get("tokenizer") for r in res}]
            docs = comp.get("docs") or {}
            body.append(subsection("Compression against reference tokenizers", Html(
                img(chart, "compression: characters per token")
                + table(["tokenizer", "vocab", "en chars/token", "en bytes/token",
                         "zh chars/token", "zh bytes/token", "published en", "published zh"],
                        rows)
                + note(f"Measured on held-out text ({fmt(docs.get('en'))} English, "
                       f"{fmt(docs.get('zh'))} Chinese documents) that the tokenizer never saw; "
                       f"the self-trained one is orange. Published figures are on another "
                       f"corpus (cc100), for orientation only.")), "compression"))
        else:
            comp_m = m.get("compression") or {}
            body.append(subsection("Compression of the self-trained tokenizer", Html(
                table(["language", "chars/token", "bytes/token", "documents", "tokens"],
                      [[lang, v.get("chars_per_token"), v.get("bytes_per_token"),
                        v.get("docs"), v.get("tokens")] for lang, v in comp_m.items()])
                + missing_part(run, "The comparison with GPT-2, a Llama-style 32k vocabulary "
                               "and cl100k", TOOLS[0], path=TOOLS[0].path)), "compression"))
        sample = m.get("sample") or {}
        cfg = m.get("config") or {}
        srows = [["vocabulary size",
                  (m.get("counts") or {}).get("vocab_size", cfg.get("vocab_size"))],
                 ["documents in the sample", sample.get("sample_docs")],
                 ["sample size", human_bytes(sample["sample_bytes"])
                  if isinstance(sample.get("sample_bytes"), (int, float)) else None],
                 ["characters", sample.get("sample_chars")],
                 ["documents cropped", sample.get("cropped_docs")],
                 ["Chinese documents (zh)", sample.get("zh_docs")],
                 ["English documents (en)", sample.get("en_docs")],
                 ["Han share of letters", sample.get("han_share")],
                 ["ASCII-letter share", sample.get("ascii_share")],
                 ["held-out documents", sample.get("heldout_docs")],
                 ["held-out documents cropped", sample.get("heldout_cropped_docs")],
                 ["documents it sampled from", (m.get("counts") or {}).get("docs_in")]]
        left = subsection("Training sample", table(["", "value"], srows, "kv"), "tok-sample")
    else:
        left = Html("")
    hist = (run.files.json(PACK_STATS) or {}).get("tokens_per_doc") if pack.ran else None
    status = section_status([tok, cmp_])
    if hist and hist.get("counts"):
        chart = tokens_chart(hist["bins"], hist["counts"])
        run.figures += bool(chart)
        # pack's figures, not the tokenizer's: a pack made with an earlier tokenizer (or
        # from an earlier dedup/) is said to be so here too, not only in section 5
        old = (Html(f'<div class="stale" data-step="{pack.step.key}"><b>pack is '
                    f'{esc(pack.state)}</b>: {esc(pack.message)}. This histogram is of what '
                    f'is packed on disk, not of the tokenizer above.</div>')
               if pack.state != "ok" else Html(""))
        if pack.state != "ok":
            status = "stale"
        right = subsection("Tokens per document", old + img(chart, "tokens per document")
                           + note("From pack's report (pack_report/pack_stats.json)."),
                           "tokens-per-doc")
    elif not pack.ran:
        right = missing_part(run, "The tokens-per-document histogram (pack's report)",
                             pack.step)
    elif not (run.data / PACK_STATS).exists():
        right = missing_part(run, PACK_STATS, pack.step)
    else:
        right = note(f"{PACK_STATS} has no tokens_per_doc histogram (or is unreadable).")
    body.append(Html(f'<div class="grid2"><div>{left}</div><div>{right}</div></div>'))
    return section("tokenizer", "4. Tokenizer", status, "".join(body))
