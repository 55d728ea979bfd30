"""Near-duplicate texts side by side: a word-level diff (a character at a time for Chinese),
what one text lacks struck, what the other adds underlined, long identical stretches
shortened.
"""

from __future__ import annotations

import difflib
import re

from pipeline.report.html import Html, esc

DIFF_CHARS = 4000            # characters of each text compared in a cluster diff
DIFF_CONTEXT = 120           # identical characters kept either side of a difference

# a word of a spaced script, a run of spaces, or any other single character (one CJK
# character, one punctuation mark): Chinese text diffs character by character
_TOKEN = re.compile(r"\s+|[0-9A-Za-z_\u00c0-\u024f\u0370-\u03ff\u0400-\u04ff]+|\S")


def _equal_run(text: str, first: bool, last: bool, context: int) -> Html:
    """An identical stretch, shortened to `context` characters either side of the
    differences around it (a note says how much is left out)."""
    keep_head = 0 if first else context
    keep_tail = 0 if last else context
    if len(text) <= keep_head + keep_tail + 40:
        return esc(text)
    skipped = len(text) - keep_head - keep_tail
    return Html(esc(text[:keep_head]) + f'<span class="skip">[… {skipped:,} identical '
                f'characters …]</span>' + esc(text[len(text) - keep_tail:]))


def diff_pair(a: str, b: str, limit: int = DIFF_CHARS, context: int | None = DIFF_CONTEXT
              ) -> tuple[Html, Html, int]:
    """Word-level diff of the first `limit` characters of a and b: a with <del> on what b
    lacks, b with <ins> on what it adds, and the number of differing stretches. Identical
    stretches longer than 2 x `context` characters are shortened (context=None: never)."""
    ta, tb = _TOKEN.findall((a or "")[:limit]), _TOKEN.findall((b or "")[:limit])
    ops = difflib.SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes()
    left, right, changes = [], [], 0
    for k, (op, i1, i2, j1, j2) in enumerate(ops):
        if op == "equal":
            text = "".join(ta[i1:i2])
            if context is not None and len(ops) > 1:
                same = _equal_run(text, k == 0, k == len(ops) - 1, context)
            else:
                same = esc(text)
            left.append(same)
            right.append(same)
            continue
        changes += 1
        sa, sb = esc("".join(ta[i1:i2])), esc("".join(tb[j1:j2]))
        if sa:
            left.append(f"<del>{sa}</del>")
        if sb:
            right.append(f"<ins>{sb}</ins>")
    return Html("".join(left)), Html("".join(right)), changes


def side_by_side(a_title, a_text, b_title, b_text, limit: int = DIFF_CHARS) -> Html:
    """Two texts in two columns, their differences marked; titles are Html already."""
    left, right, changes = diff_pair(a_text or "", b_text or "", limit)
    cut = max(len(a_text or ""), len(b_text or "")) > limit
    if changes:
        what = (f"{changes:,} differing stretch{'' if changes == 1 else 'es'}"
                f"{f' in the first {limit:,} characters' if cut else ''}")
    else:
        what = "no difference in the part of the texts the stage saved"
    return Html(
        f'<div class="pair"><div><div class="doc-head">{a_title}</div>'
        f'<pre class="doc diff">{left}</pre></div>'
        f'<div><div class="doc-head">{b_title}</div><pre class="doc diff">{right}</pre></div>'
        f'</div><p class="note">{what}; <del>struck</del>: only in the left text, '
        f'<ins>underlined</ins>: only in the right; long identical stretches are shortened.</p>')
