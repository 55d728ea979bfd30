"""The page's HTML: everything that comes from the data goes through esc() or show_text()
(escaped, control and invisible characters shown as visible stand-ins), and the small
builders of the page (tables, badges, texts, images, notes).
"""

from __future__ import annotations

import html
import re

EXAMPLE_CHARS = 400          # characters shown of each example text


class Html(str):
    """A fragment that is already HTML (escaped where it holds data)."""


# C0 controls as their visible Control Pictures (U+2400..), DEL as U+2421; newline and tab
# stay, the page shows texts with white-space: pre-wrap.
_CONTROLS = {i: 0x2400 + i for i in range(32) if i not in (0x09, 0x0A)}
_CONTROLS[0x7F] = 0x2421
# invisible or layout-changing code points (C1 controls, zero-width and direction marks,
# bidi overrides, line/paragraph separators, BOM, lone surrogates, non-characters): a tag.
_INVISIBLE = re.compile("[\x80-\x9f\u200b\u200e\u200f\u2028\u2029\u202a-\u202e"
                        "\u2060-\u2064\u2066-\u2069\ufeff\ud800-\udfff\ufffe\uffff]")


def visible(text: str) -> str:
    """text with control and invisible characters replaced by visible stand-ins."""
    text = _INVISIBLE.sub(lambda m: f"\u27e8U+{ord(m.group()):04X}\u27e9", text)
    return text.translate(_CONTROLS)


def esc(value) -> Html:
    """Any value as HTML text (attribute-safe): controls made visible, then escaped."""
    return Html(html.escape(visible(str(value)), quote=True))


def show_text(text, limit: int = EXAMPLE_CHARS) -> Html:
    """A document's text for the page: cut to `limit` characters, escaped, controls shown."""
    s = "" if text is None else str(text)
    extra = len(s) - limit
    out = esc(s[:limit] if extra > 0 else s)
    if extra > 0:
        out += f'<span class="more"> … (+{extra:,} characters)</span>'
    return Html(out)


def fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def hfmt(v) -> str:
    """fmt(v) for a place inside HTML: a value read from a report file may be any text."""
    return esc(fmt(v))


def share(n, total) -> str:
    return f"{100.0 * n / total:.2f}%" if total else "—"


def table(headers: list, rows: list[list], cls: str = "", row_attrs: list[str] | None = None
          ) -> Html:
    """An HTML table; Html cells go in as they are, anything else is formatted and escaped;
    numbers are right-aligned."""
    def cell(c, tag):
        num = isinstance(c, (int, float)) and not isinstance(c, bool)
        body = c if isinstance(c, Html) else esc(fmt(c))
        return f'<{tag}{" class=num" if num else ""}>{body}</{tag}>'
    out = [f'<table class="{cls}">' if cls else "<table>",
           "<thead><tr>" + "".join(cell(h, "th") for h in headers) + "</tr></thead><tbody>"]
    for i, r in enumerate(rows):
        attrs = (" " + row_attrs[i]) if row_attrs and row_attrs[i] else ""
        out.append(f"<tr{attrs}>" + "".join(cell(c, "td") for c in r) + "</tr>")
    out.append("</tbody></table>")
    return Html("".join(out))


def badge(state: str, text: str | None = None) -> Html:
    return Html(f'<span class="badge {esc(state)}">{esc(text or state)}</span>')


def pre(text, limit: int = EXAMPLE_CHARS, cls: str = "doc") -> Html:
    return Html(f'<pre class="{cls}">{show_text(text, limit)}</pre>')


def example_pre(text, saved: int | None, limit: int = EXAMPLE_CHARS) -> Html:
    """A removed document's text as clean.py saved it: its first `saved` characters
    (config example_chars). A text that long is marked as cut there: the rest of the
    document was never saved, so the page cannot say how much more there was."""
    s = "" if text is None else str(text)
    if isinstance(saved, int) and saved > 0 and saved <= len(s) <= limit:
        return Html(f'<pre class="doc">{esc(s)}<span class="more"> … (the first {saved:,} '
                    f'characters: clean.py saves no more of a document)</span></pre>')
    return pre(s, limit)


def img(uri: str | None, alt: str) -> Html:
    if not uri:
        return Html("")
    return Html(f'<img class="chart" src="{uri}" alt="{esc(alt)}">')


def note(text, cls: str = "note") -> Html:
    return Html(f'<p class="{cls}">{text if isinstance(text, Html) else esc(text)}</p>')
