"""Section 5 of the page, pack and verify: tokens, EOS and the train/val split of the
packed files; verify.py's checklist, its decoded windows and its detail tables.
"""

from __future__ import annotations

from pipeline.report.html import Html, badge, esc, fmt, note, pre, table
from pipeline.report.page import banners, section, section_status, subsection
from pipeline.report.state import Run
from pipeline.tables import human_bytes, window_text

WINDOWS = 5                  # decoded windows shown from verify's report
DETAIL_CHARS = 4000          # characters shown of one verify detail block


def windows_of(item: dict) -> list[str]:
    """The decoded windows of verify's item 2: structured when verify saved them so, else
    one string each in its details."""
    if item.get("windows"):
        return [f"tokens {w['start']:,}..{w['end']:,}: {window_text(w['text'])}"
                for w in item["windows"]]
    return [d for d in item.get("details") or [] if isinstance(d, str)]


def section_pack(run: Run) -> Html:
    pack, ver = run.states["pack_parallel"], run.states["verify"]
    body = [banners(run, [pack, ver])]
    if pack.ran:
        c = pack.data.get("counts") or {}
        cfg = pack.data.get("config") or {}
        itemsize = 4 if str(c.get("dtype", "uint16")).endswith("32") else 2
        rows = []
        for split in ("train", "val"):
            s = c.get(split) or {}
            ok = s.get("eos") == s.get("docs")
            rows.append([f"{split}.bin", s.get("docs"), s.get("tokens"), s.get("eos"),
                         badge("ok", "= documents") if ok else badge("fail", "≠ documents"),
                         human_bytes(s.get("bytes") or 0),
                         human_bytes((s.get("tokens") or 0) * itemsize)])
        rows.append(["total", c.get("docs_out"), c.get("tokens"), c.get("eos"), "",
                     human_bytes(c.get("bytes_out") or 0),
                     human_bytes((c.get("tokens") or 0) * itemsize)])
        tk = c.get("tokenizer") or {}
        body.append(table(["file", "documents", "tokens", "EOS", "EOS check", "text",
                           "on disk"], rows, "pack"))
        body.append(note(
            f"{c.get('bytes_per_token', '?')} bytes of text per token; EOS id "
            f"{c.get('eos_id', '?')}; {c.get('dtype', '?')}; validation share "
            f"{cfg.get('val_ratio', '?')} (seed {cfg.get('seed', '?')}), "
            f"{fmt((c.get('val') or {}).get('docs'))} documents; tokenizer "
            f"{tk.get('path', '?')} ({fmt(tk.get('vocab_size'))} tokens); encoder "
            f"{c.get('encoder', '?')}."))
    if ver.ran:
        items = [i for i in ver.data.get("items") or [] if isinstance(i, dict)]
        passed = sum(bool(i.get("ok")) for i in items)
        body.append(subsection(f"Acceptance checklist: {passed} of {len(items)} PASS", Html(
            table(["#", "item", "result", "figures", "likely cause / rerun"],
                  [[i.get("num"), i.get("title"),
                    badge("pass", "PASS") if i.get("ok") else badge("fail", "FAIL"),
                    Html("<br>".join(esc(f) for f in i.get("figures") or [])),
                    i.get("cause") or ""] for i in items], "checklist",
                  [f'data-item="{esc(i.get("num"))}" data-result='
                   f'"{"pass" if i.get("ok") else "fail"}"' for i in items])), "checklist"))
        win = next((i for i in items if i.get("num") == 2), None)
        if win and windows_of(win):
            ws = windows_of(win)
            body.append(subsection(
                f"Decoded windows ({min(WINDOWS, len(ws))} of {len(ws)}; newlines as they are, "
                f"<|endoftext|> a document boundary)",
                Html("".join(pre(w, 800, "doc window") for w in ws[:WINDOWS])), "windows"))
        details = [(i, d) for i in items if i.get("num") != 2 for d in i.get("details") or []]
        if details:
            body.append(Html("<details><summary>The checklist's detail tables</summary>"
                             + "".join(f'<p class="figs">{esc(i.get("num"))}. '
                                       f'{esc(i.get("title"))}</p>'
                                       f'{pre(d, DETAIL_CHARS, "table")}' for i, d in details)
                             + "</details>"))
    return section("pack", "5. Pack and verify", section_status([pack, ver]), "".join(body))
