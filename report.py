"""One self-contained HTML page of the whole run: what happened to the data, and is it right.

    python report.py                                    # reads data/, writes data/report.html
    python report.py --data-dir /big/data --output /tmp/run.html

Run it after any stage. The page is for the person who reviews a corpus before a training
run. A header sums the run up (documents and bytes in and out, tokens, the checklist, each
stage's state), then one section per topic:

  1 funnel          documents and bytes after each stage, the removals by reason
  2 cleaning        each rule's threshold, reach and examples of what it removed; the
                    measured signals' histograms with the thresholds drawn; the language
                    mix before and after; the threshold sweep of `clean.py --sweep`
  3 deduplication   exact-duplicate groups; MinHash clusters, verified candidate
                    similarities and the LSH S-curve around the threshold; the largest
                    clusters side by side with their differences marked
  4 tokenizer       compression against GPT-2, a Llama-style 32k vocabulary and cl100k
                    (compare_tokenizers.py); tokens per document; the training sample
  5 pack & verify   tokens, EOS, the train/val split, decoded windows, the checklist

Every stage that has not run yet is marked missing, with the command that runs it, and
every stage whose manifest check fails (pipeline.manifest.check_input: an upstream output
was rewritten after it was built, or a file it lists is gone or changed size) is marked stale, with the
check's message. The page reads only the manifests and the small report files the stages
write beside their output, never a corpus shard nor the kept signals/ or signatures/:
every histogram is drawn from counts a stage saved, so it takes seconds on a 30 GB corpus
as on the sample. It is one file, inline CSS and base64 PNG figures (matplotlib's Agg
backend, modest DPI), with no script and nothing fetched, under a Content-Security-Policy
that forbids fetching: it opens offline in any browser and can be mailed (< 5 MB). All
text that comes from the data is escaped, and control characters are shown as visible
symbols.
"""

from __future__ import annotations

import pipeline  # noqa: F401  (first, before numpy: see pipeline/__init__.py)

import argparse
import base64
import difflib
import html
import io
import json
import os
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from pipeline import layout
from pipeline.disk import check_report_path, temporary_beside
from pipeline.errors import ArgumentParser, StageError, run_stage
from pipeline.manifest import check_input, display_path, read_manifest, source_name
from pipeline.tables import human_bytes, window_text

REPORT_NAME = "report.html"
PAGE_TITLE = "Data pipeline report:"   # in every page's <title>
MAX_BYTES = 5_000_000        # the page must stay mailable
DPI = 100                    # figures: modest resolution keeps the page small
EXAMPLES = 5                 # example texts per cleaning rule
EXAMPLE_CHARS = 400          # characters shown of each example text
CLUSTERS = 3                 # largest near-duplicate clusters shown side by side
PAIRS_PER_CLUSTER = 2        # removed members compared with the kept one, per cluster
DIFF_CHARS = 4000            # characters of each text compared in a cluster diff
DIFF_CONTEXT = 120           # identical characters kept either side of a difference
WINDOWS = 5                  # decoded windows shown from verify's report
DETAIL_CHARS = 4000          # characters shown of one verify detail block


# --------------------------------------------------------------------------------------
# The steps, where each leaves its mark, and the command that runs it.
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    key: str        # the manifest's "stage" (or the tool's name)
    label: str      # what the page calls it
    script: str
    path: str       # the manifest (or report) that shows it ran, under the data folder
    args: str       # the command's flags; {d} is the data folder

    def command(self, data: Path) -> str:
        d = display_path(data)
        return " ".join(["python", self.script] +
                        [shlex.quote(a.format(d=d)) for a in self.args.split()])


STAGES = [
    Step("download_data", "download", "download_data.py", "raw/manifest.json",
         "--output {d}/raw"),
    Step("clean", "clean", "clean.py", "cleaned/manifest.json",
         "--input {d}/raw --output {d}/cleaned"),
    Step("dedup_exact", "dedup_exact", "dedup_exact.py", "dedup_exact/manifest.json",
         "--input {d}/cleaned --output {d}/dedup_exact"),
    Step("dedup_minhash", "dedup_minhash", "dedup_minhash.py", "dedup/manifest.json",
         "--input {d}/dedup_exact --output {d}/dedup"),
    Step("train_tokenizer", "tokenizer", "train_tokenizer.py", "tokenizer/manifest.json",
         "--input {d}/dedup --output {d}/tokenizer"),
    Step("pack_parallel", "pack", "pack_parallel.py", layout.PACK_MANIFEST,
         "--input {d}/dedup --tokenizer {d}/tokenizer/tokenizer.json --output {d}"),
]
TOOLS = [
    Step("compare_tokenizers", "compare_tokenizers", "compare_tokenizers.py",
         "tokenizer/report/compression.json", "--tokenizer {d}/tokenizer"),
    Step("verify", "verify", "verify.py", "verify_report.json", "--data-dir {d}"),
]
FUNNEL = ["download_data", "clean", "dedup_exact", "dedup_minhash", "pack_parallel"]

# report files, relative to the data folder
CLEAN_STATS = "cleaned/report/clean_stats.json"
CLEAN_SWEEP = "cleaned/report/sweep.json"
EXACT_STATS = "dedup_exact/report/dedup_exact_stats.json"
MINHASH_STATS = "dedup/report/dedup_minhash_stats.json"
MINHASH_SWEEP = "dedup/report/sweep.json"
TOKENIZER_MANIFEST = "tokenizer/manifest.json"
PACK_STATS = "pack_report/pack_stats.json"

# --------------------------------------------------------------------------------------
# Escaping: everything that comes from the data goes through esc() or show_text().
# --------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------
# What ran, and whether it is fresh.
# --------------------------------------------------------------------------------------

@dataclass
class State:
    step: Step
    state: str                       # ok | stale | missing | unreadable
    message: str = ""
    data: dict | None = None         # the manifest (or the tool's report), also when stale
    mtime: float | None = None

    @property
    def ran(self) -> bool:
        return self.data is not None


def stage_state(data: Path, step: Step) -> State:
    """A stage's manifest and its check: missing, stale (with the check's message) or ok."""
    path = data / step.path
    if not path.exists():
        return State(step, "missing", f"not run yet: run {step.command(data)}")
    try:
        m = read_manifest(path)
    except StageError as e:
        return State(step, "unreadable", str(e))
    if not isinstance(m, dict):
        return State(step, "unreadable", f"{display_path(path)} is not a manifest; "
                                         f"rerun {step.script}")
    st = State(step, "ok", data=m, mtime=path.stat().st_mtime)
    try:
        check_input(path)   # stats the files it lists, reads the manifests above it
    except StageError as e:
        st.state, st.message = "stale", str(e)
    except (KeyError, TypeError, ValueError, OSError) as e:   # a manifest in another shape
        st.state = "unreadable"
        st.message = f"{display_path(path)}: cannot check ({e!r}); rerun {step.script}"
    return st


def unfinished_run(data: Path, step: Step) -> Path | None:
    """The staging folder a run of this stage left, stopped or still running: the same
    command resumes from it, another one replaces it."""
    if step not in STAGES:
        return None
    out = (data / step.path).parent
    p = layout.staging_path(out, step.key, files_into=step.path == layout.PACK_MANIFEST)
    return p if p.is_dir() else None


def tool_state(data: Path, step: Step, upstream: list[State]) -> State:
    """A report-only tool (no manifest): stale when a stage it reads was rewritten after it."""
    path = data / step.path
    if not path.exists():
        return State(step, "missing", f"not run yet: run {step.command(data)}")
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return State(step, "unreadable", f"{display_path(path)}: unreadable ({e}); "
                                         f"rerun {step.script}")
    if not isinstance(d, dict):
        return State(step, "unreadable", f"{display_path(path)}: not a report; "
                                         f"rerun {step.script}")
    st = State(step, "ok", data=d, mtime=path.stat().st_mtime)
    behind = next((u for u in upstream if u.state in ("stale", "unreadable")), None)
    if behind is not None:   # it read outputs that no longer follow from their inputs
        st.state = "stale"
        st.message = (f"{step.path} was made from {behind.step.path}, which is "
                      f"{behind.state}; rerun {behind.step.script}, the steps below it "
                      f"and {step.script}")
        return st
    seen = tool_fingerprints(d)
    if seen is not None:   # the report names the outputs it read: compare fingerprints
        now = {str(Path(u.step.path)): (u.data or {}).get("output_fingerprint") for u in upstream}
        changed = [p for p, fp in seen.items() if p in now and now[p] != fp]
        if changed:
            st.state = "stale"
            what = "is gone" if now[changed[0]] is None else f"was rewritten after {step.path} was made"
            st.message = f"{changed[0]} {what}; rerun {step.script}"
        return st
    newer = [u for u in upstream if u.mtime and u.mtime > st.mtime]
    if newer:
        more = f" (and {len(newer) - 1} more)" if len(newer) > 1 else ""
        st.state = "stale"
        st.message = (f"{step.path} was written before {newer[0].step.path}{more} was "
                      f"rewritten; rerun {step.script}")
    return st


def tool_fingerprints(d: dict) -> dict[str, str] | None:
    """The stage outputs a tool's report says it read ({manifest path: fingerprint}), or
    None for a report from before tools recorded them (then file times decide)."""
    if isinstance(d.get("manifests"), dict):              # verify_report.json
        return d["manifests"]
    if d.get("tokenizer_fingerprint"):                    # compression.json
        return {"tokenizer/manifest.json": d["tokenizer_fingerprint"]}
    return None


def packed_tokenizer(data: Path, pack: dict | None) -> tuple[Path | None, dict]:
    """The manifest of the tokenizer pack read (data/tokenizer/'s, or one from elsewhere
    with --tokenizer), resolved from the path pack's manifest records, and that record."""
    rec = ((pack or {}).get("extra_inputs") or {}).get("tokenizer") or {}
    rel = rec.get("manifest")
    return ((data / rel).resolve() if isinstance(rel, str) else None), rec


def run_states(data: Path) -> dict[str, State]:
    states = {s.key: stage_state(data, s) for s in STAGES}
    pack, tok = states["pack_parallel"], states["train_tokenizer"]
    used, rec = packed_tokenizer(data, pack.data)
    if pack.state == "ok" and used is not None:   # check_input follows the main input only
        here = used == (data / TOKENIZER_MANIFEST).resolve()
        try:
            now = tok.data if here else read_manifest(used)
        except StageError:
            now = None
        # data/tokenizer/ deleted is shown by next_step as a folder gone (pack's output
        # stays usable); one from elsewhere that is gone or rewritten makes pack stale
        if here and tok.state == "unreadable":   # there, but nothing to check pack against
            pack.state = "stale"
            pack.message = (f"{display_path(data)}/train.bin cannot be checked: the manifest "
                            f"of the tokenizer it was packed with ({display_path(used)}) is "
                            "unreadable; rerun train_tokenizer.py, then pack_parallel.py")
        elif (now or {}).get("output_fingerprint") != rec.get("fingerprint") and (now or not here):
            pack.state = "stale"
            pack.message = (f"{display_path(data)}/train.bin is stale: the tokenizer it was "
                            f"packed with ({display_path(used.parent)}) was "
                            f"{'rewritten' if now else 'removed'} after pack_parallel.py read "
                            f"it; rerun pack_parallel.py")
    states["compare_tokenizers"] = tool_state(data, TOOLS[0], [tok])
    states["verify"] = tool_state(data, TOOLS[1], [states[s.key] for s in STAGES])
    return states


class Inputs:
    """The small files the page is drawn from, each read once; the page lists them."""

    def __init__(self, data: Path):
        self.data = data
        self.read: dict[str, int] = {}
        self.problems: list[str] = []

    def note_read(self, rel: str) -> None:
        p = self.data / rel
        if p.exists():
            self.read[rel] = p.stat().st_size

    def json(self, rel: str) -> dict | None:
        p = self.data / rel
        if not p.exists():
            return None
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as e:
            self.problems.append(f"{rel}: unreadable ({e})")
            return None
        self.read[rel] = p.stat().st_size
        return d if isinstance(d, dict) else None

    def jsonl(self, rel: str, n: int) -> list[dict]:
        """The first n well-formed records of a .jsonl file (the rest is never read)."""
        p = self.data / rel
        out: list[dict] = []
        if not p.exists():
            return out
        try:
            with open(p, encoding="utf-8", errors="replace") as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except (ValueError, RecursionError):
                        continue
                    if isinstance(rec, dict):
                        out.append(rec)
                    if len(out) >= n:
                        break
        except OSError as e:   # a folder where the file goes, no permission
            self.problems.append(f"{rel}: unreadable ({e})")
            return []
        self.read[rel] = p.stat().st_size
        return out


@dataclass
class Run:
    data: Path
    states: dict[str, State]
    files: Inputs
    figures: int = 0
    errors: list[str] = field(default_factory=list)

    def m(self, key: str) -> dict | None:
        return self.states[key].data

    def counts(self, key: str) -> dict:
        return (self.m(key) or {}).get("counts") or {}


# --------------------------------------------------------------------------------------
# Figures: small matplotlib charts as base64 PNG data URIs.
# --------------------------------------------------------------------------------------

BLUE, GREY, RED, GREEN, ORANGE = "#3b6ea5", "#9aa5b1", "#c0392b", "#2e8b57", "#d68910"
STAGE_COLORS = {"download_data": GREY, "clean": BLUE, "dedup_exact": ORANGE,
                "dedup_minhash": "#8e44ad", "pack_parallel": GREEN}
RC = {"font.size": 9, "axes.titlesize": 10, "axes.spines.top": False,
      "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3,
      "figure.facecolor": "white", "savefig.facecolor": "white",
      # text from the corpus or a rule file is drawn as it is: a "$" would start a formula
      # (and a bad one took the whole cleaning section with it)
      "text.parse_math": False}


def new_figure(nrows: int = 1, ncols: int = 1, *, figsize, **kw):
    """A figure on the Agg backend, explicitly (no display, no pyplot state), and its axes."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **kw)


def plain_number(v: float, _pos=None) -> str:
    """A tick label as plain text: 1, 1,000, 0.01."""
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def log_scale(ax, axis: str = "y", base: int = 10) -> None:
    """A log axis whose tick labels are plain numbers. matplotlib writes them as formulas
    ($10^{3}$), which RC's text.parse_math=False would print as they are."""
    getattr(ax, f"set_{axis}scale")("log", base=base)
    a = ax.yaxis if axis == "y" else ax.xaxis

    def minor(v: float, _pos=None) -> str:   # 2 and 5 of each decade, on a short axis
        lo, hi = sorted(a.get_view_interval())
        lead = round(v / 10 ** np.floor(np.log10(v))) if v > 0 else 0
        return plain_number(v) if lo > 0 and hi / lo < 100 and lead in (2, 5) else ""

    a.set_major_formatter(FuncFormatter(plain_number))
    a.set_minor_formatter(FuncFormatter(minor) if base == 10 else NullFormatter())


def png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def log_edges(edges) -> np.ndarray:
    """Histogram edges for a log axis: a first edge of 0 becomes half the next one."""
    e = np.asarray(edges, dtype=float).copy()
    if len(e) > 1 and e[0] <= 0:
        e[0] = (e[e > 0][0] / 2) if (e > 0).any() else 1.0
    return e


def funnel_chart(rows: list[tuple[str, int | None, int | None]]) -> str:
    """Documents and bytes after each stage, as horizontal bars (top: download)."""
    with rc_context(RC):
        fig, axes = new_figure(1, 2, figsize=(10, 0.8 + 0.42 * len(rows)), sharey=True)
        y = np.arange(len(rows))[::-1]
        for ax, col, title, show in ((axes[0], 1, "documents", fmt),
                                     (axes[1], 2, "text bytes", human_bytes)):
            vals = [r[col] for r in rows]
            top = max([v for v in vals if v] or [1])
            for yi, (label, *_), v in zip(y, rows, vals):
                if v is None:
                    ax.text(0, yi, "  not run", va="center", color=GREY, style="italic")
                    continue
                ax.barh(yi, v, color=BLUE, height=0.6)
                ax.text(v, yi, f" {show(v)} ({100 * v / top:.1f}%)", va="center", fontsize=8)
            ax.set_xlim(0, top * 1.45)
            ax.xaxis.set_major_formatter(FuncFormatter(
                lambda x, _pos, show=show: show(int(x)) if x else "0"))
            ax.set_title(f"{title} after each stage")
            ax.grid(axis="y", visible=False)
        axes[0].set_yticks(y, [r[0] for r in rows])
        axes[0].set_ylim(-0.6, len(rows) - 0.4)
        fig.tight_layout()
        return png(fig)


def removals_chart(items: list[tuple[str, str, int]]) -> str | None:
    """Documents removed by each reason, coloured by the stage that removed them."""
    items = [i for i in items if i[2]]
    if not items:
        return None
    with rc_context(RC):
        fig, ax = new_figure(figsize=(10, 0.7 + 0.3 * len(items)))
        y = np.arange(len(items))[::-1]
        top = max(i[2] for i in items)
        for yi, (stage, reason, n) in zip(y, items):
            ax.barh(yi, n, color=STAGE_COLORS.get(stage, GREY), height=0.6)
            ax.text(n, yi, f" {n:,}", va="center", fontsize=8)
        ax.set_yticks(y, [f"{reason} ({stage})" for stage, reason, _ in items])
        ax.set_xlim(0, top * 1.15)
        ax.set_title("documents removed, by reason")
        ax.grid(axis="y", visible=False)
        return png(fig)


def near_threshold(edges, counts, threshold: float, removes: str, log: bool) -> dict:
    """Documents on each side of a threshold, from histogram counts: all, and those near it
    (within a factor 2 on a log scale; on a linear one, within a tenth of the histogram's
    range: 0.1 on a share, 1.5 on a mean word length drawn from 0 to 15). A bin that
    straddles the threshold is counted apart (the thresholds are normally bin edges)."""
    e = np.asarray(edges, dtype=float)
    c = np.asarray(counts, dtype=float)
    lo_e, hi_e = e[:-1], e[1:]
    # edges and thresholds are decimals stored as floats (0.8 - 0.1 is 0.7000000000000001):
    # compared with a tolerance, or an edge equal to the window's end falls out of it
    tol = 1e-9 * max(1.0, abs(threshold))
    # a fixed 0.1 would hold no whole bin of a signal that is no share (its bins wider)
    width = 0.1 * (e[-1] - e[0])
    lo, hi = (threshold / 2, threshold * 2) if log else (threshold - width, threshold + width)
    lo, hi = round(max(lo, e[0]), 12), round(min(hi, e[-1]), 12)   # within the histogram
    near = (lo_e >= lo - tol) & (hi_e <= hi + tol)
    # a bin [lo, hi) holds values >= lo: with "below" (value < t removes) a bin ending at t
    # is all removed and one starting at t all kept; with "above" (value > t removes) a
    # bin starting at t also holds the kept values equal to t, so it holds both sides
    if removes == "below":
        rem, kept = hi_e <= threshold + tol, lo_e >= threshold - tol
    else:
        rem, kept = lo_e > threshold + tol, hi_e <= threshold + tol
    return {"total": int(c.sum()), "removed_side": int(c[rem].sum()),
            "kept_side": int(c[kept].sum()), "straddling": int(c[~rem & ~kept].sum()),
            "near_removed": int(c[rem & near].sum()), "near_kept": int(c[kept & near].sum()),
            "window": (lo, hi)}


def signal_chart(edges, counts, threshold: float | None, removes: str, log: bool,
                 xlabel: str, title: str, layers: list[tuple[str, list, str]] | None = None
                 ) -> str:
    """A saved histogram (log count axis) with the threshold drawn and the removed side
    shaded. layers: the counts split by outcome, [(label, counts, colour)], drawn stacked
    (kept, removed by this rule, removed by another rule)."""
    e = log_edges(edges) if log else np.asarray(edges, dtype=float)
    c = np.asarray(counts, dtype=float)
    with rc_context(RC):
        fig, ax = new_figure(figsize=(5.6, 2.7))
        base = 0.7
        if layers:
            top = np.zeros_like(c)
            for label, part, colour in layers:
                top = top + np.asarray(part, dtype=float)
            # draw from the full height down, so each visible band is one outcome
            acc = top.copy()
            for label, part, colour in layers:
                ax.stairs(np.where(acc > 0, acc, base), e, fill=True, baseline=base,
                          color=colour, alpha=0.9, label=label)
                acc = acc - np.asarray(part, dtype=float)
            ax.legend(fontsize=7, loc="best", frameon=True, framealpha=0.8)
        else:
            ax.stairs(np.where(c > 0, c, base), e, fill=True, baseline=base, color=BLUE,
                      alpha=0.85)
        log_scale(ax, "y")
        ax.set_ylim(base, max(c.max() if len(c) else 1, 1) * 2)
        if log:
            log_scale(ax, "x")
        nz = np.flatnonzero(c)
        if len(nz):   # zoom on the occupied range, keeping the threshold in view
            x0, x1 = e[nz[0]], e[nz[-1] + 1]
            if threshold is not None:
                x0, x1 = min(x0, threshold), max(x1, threshold)
            pad = (x1 / x0) ** 0.05 if log and x0 > 0 else (x1 - x0) * 0.03
            ax.set_xlim((x0 / pad, x1 * pad) if log and x0 > 0 else (x0 - pad, x1 + pad))
        if threshold is not None:
            ax.axvline(threshold, color=RED, ls="--", lw=1.5)
            xl = ax.get_xlim()
            span = (xl[0], threshold) if removes == "below" else (threshold, xl[1])
            ax.axvspan(*span, color=RED, alpha=0.07, lw=0)
            ax.set_xlim(xl)
            ax.text(threshold, ax.get_ylim()[1], f" threshold {threshold:g}", color=RED,
                    va="top", ha="left" if removes == "below" else "right", fontsize=8)
        ax.set_xlabel(xlabel + (" (log)" if log else ""))
        ax.set_ylabel("documents (log)")
        ax.set_title(title)
        return png(fig)


def language_chart(reached: dict, kept: dict, top: int = 12) -> str | None:
    if not reached:
        return None
    langs = sorted(reached, key=lambda k: (-reached[k], k))
    top = len(langs) if len(langs) <= top + 1 else top
    rows = [(k, reached[k], kept.get(k, 0)) for k in langs[:top]]
    if len(langs) > top:
        rest = langs[top:]
        rows.append((f"{len(rest)} others", sum(reached[k] for k in rest),
                     sum(kept.get(k, 0) for k in rest)))
    with rc_context(RC):
        fig, ax = new_figure(figsize=(5.6, 0.8 + 0.32 * len(rows)))
        y = np.arange(len(rows))[::-1]
        ax.barh(y + 0.2, [r[1] for r in rows], height=0.38, color=GREY, label="reached language ID")
        ax.barh(y - 0.2, [max(r[2], 0) for r in rows], height=0.38, color=BLUE, label="kept")
        log_scale(ax, "x")
        ax.set_yticks(y, [r[0] for r in rows])
        ax.set_xlabel("documents (log)")
        ax.set_title("language mix before and after the language rule")
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(axis="y", visible=False)
        return png(fig)


def sizes_chart(sizes: dict, xlabel: str, title: str) -> str | None:
    """{size: how many groups} as bars (or a log-log plot when there are many sizes)."""
    pts = sorted((int(k), int(v)) for k, v in sizes.items() if int(v) > 0)
    if not pts:
        return None
    with rc_context(RC):
        fig, ax = new_figure(figsize=(5.6, 2.6))
        x, n = zip(*pts)
        if len(pts) <= 25:
            ax.bar([str(v) for v in x], n, color=BLUE)
            for i, v in enumerate(n):
                ax.text(i, v, f"{v:,}", ha="center", va="bottom", fontsize=8)
            ax.set_ylim(0, max(n) * 1.2)
        else:
            ax.loglog(x, n, "o-", color=BLUE, ms=3)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("groups")
        ax.set_title(title)
        return png(fig)


def similarity_split(e: np.ndarray, c: np.ndarray, threshold: float, rejected: int | None):
    """(bins below the threshold, the bin holding it, rejected, accepted): the stage's own
    count of rejected pairs where it has one (a threshold inside a bin splits that bin),
    else the pairs in the bins below the threshold."""
    left = e[1:] <= threshold + 1e-9
    inside = (e[:-1] < threshold - 1e-9) & ~left
    if rejected is None:
        rejected = int(c[left].sum())
    return left, inside, rejected, int(c.sum()) - rejected


def similarity_chart(edges, counts, threshold: float, rejected: int | None = None) -> str:
    """The candidates' similarities; rejected: how many the stage rejected (its own count,
    exact where the threshold falls inside a bin; else the bins below it are counted)."""
    e, c = np.asarray(edges, dtype=float), np.asarray(counts, dtype=float)
    left, inside, rejected, accepted = similarity_split(e, c, threshold, rejected)
    with rc_context(RC):
        fig, ax = new_figure(figsize=(5.6, 2.7))
        ax.stairs(np.where(left, c, 0), e, fill=True, color=RED, alpha=0.7,
                  label=f"rejected ({rejected:,})")
        ax.stairs(np.where(left | inside, 0, c), e, fill=True, color=BLUE, alpha=0.85,
                  label=f"accepted as duplicates ({accepted:,})")
        if inside.any():
            ax.stairs(np.where(inside, c, 0), e, fill=True, color=GREY, alpha=0.7,
                      label="the bin holding the threshold (both)")
        ax.axvline(threshold, color=RED, ls="--", lw=1.5)
        ax.text(threshold, ax.get_ylim()[1], f"threshold {threshold:g} ", color=RED,
                ha="right", va="top", fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_xlabel("estimated Jaccard similarity of a candidate pair")
        ax.set_ylabel("candidate pairs")
        ax.set_title("verified LSH candidates")
        ax.legend(loc="upper left", fontsize=8)
        return png(fig)


def s_curve_chart(bands: int, rows: int, threshold: float) -> tuple[str, float, float]:
    """P = 1-(1-s^r)^b with the threshold marked; returns (figure, P(threshold), s at P=0.5)."""
    from algorithms.minhash import candidate_probability

    s = np.linspace(0, 1, 401)
    p = candidate_probability(s, bands, rows)
    p_t = float(candidate_probability(threshold, bands, rows))
    s_half = (1 - 0.5 ** (1 / bands)) ** (1 / rows)
    with rc_context(RC):
        fig, ax = new_figure(figsize=(5.6, 2.7))
        ax.plot(s, p, color=BLUE, lw=2, label=f"b={bands}, r={rows}")
        ax.axvline(threshold, color=RED, ls="--", lw=1.5)
        ax.plot([threshold], [p_t], "o", color=RED)
        ax.annotate(f"P({threshold:g}) = {p_t:.3f}", (threshold, p_t), xytext=(-8, -14),
                    textcoords="offset points", ha="right", color=RED, fontsize=8)
        ax.axvline(s_half, color=GREY, ls=":", lw=1)
        ax.text(s_half, 0.52, f"P=0.5 at s={s_half:.2f} ", ha="right", fontsize=8, color="#555")
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.02, 1.05)
        ax.set_xlabel("Jaccard similarity s of a pair")
        ax.set_ylabel("P(candidate)")
        ax.set_title("LSH S-curve: P = 1 - (1 - s^r)^b")
        ax.legend(loc="upper left", fontsize=8)
        return png(fig), p_t, s_half


def compression_chart(results: list[dict], published: dict) -> str | None:
    rows = [r for r in results if isinstance(r.get("en"), dict) or isinstance(r.get("zh"), dict)]
    if not rows:
        return None
    with rc_context(RC):
        fig, axes = new_figure(1, 2, figsize=(10, 0.9 + 0.42 * len(rows)), sharey=True)
        y = np.arange(len(rows))[::-1]
        for ax, lang, title in ((axes[0], "en", "English"), (axes[1], "zh", "Chinese")):
            top = 0.0
            for i, (yi, r) in enumerate(zip(y, rows)):
                v = (r.get(lang) or {}).get("chars_per_token")
                if v is None:
                    continue
                ax.barh(yi, v, height=0.6, color=ORANGE if i == 0 else BLUE)
                pub = (published.get(r.get("tokenizer")) or {}).get(lang)
                if pub is not None:
                    ax.plot([pub], [yi], "D", color="black", ms=4, mfc="white")
                ax.text(max(v, pub or 0), yi, f"  {v:.2f}", va="center", fontsize=8)
                top = max(top, v, pub or 0)
            ax.set_xlim(0, max(top, 0.1) * 1.25)
            ax.set_title(f"{title}: characters per token (higher = better)")
            ax.grid(axis="y", visible=False)
        labels = [str(r.get("tokenizer", "?")) for r in rows]
        axes[0].set_yticks(y, [lb if len(lb) <= 34 else lb[:32] + "…" for lb in labels])
        fig.tight_layout()
        if published:
            axes[1].plot([], [], "D", color="black", ms=4, mfc="white",
                         label="published figure (cc100 text)")
            fig.legend(loc="lower center", bbox_to_anchor=(0.5, -0.06), fontsize=8, frameon=False)
        return png(fig)


def tokens_chart(edges, counts) -> str | None:
    c = np.asarray(counts, dtype=float)
    if not c.sum():
        return None
    e = log_edges(edges)
    with rc_context(RC):
        fig, ax = new_figure(figsize=(5.6, 2.7))
        ax.stairs(c, e, fill=True, color=BLUE, alpha=0.85)
        log_scale(ax, "x", base=2)
        nz = np.flatnonzero(c)
        ax.set_xlim(e[max(nz[0] - 1, 0)], e[min(nz[-1] + 2, len(e) - 1)])
        for i in nz:
            ax.text(np.sqrt(e[i] * e[i + 1]), c[i], f"{int(c[i]):,}", ha="center", va="bottom",
                    fontsize=8)
        ax.set_ylim(0, c.max() * 1.2)
        ax.set_xlabel("tokens per document, EOS excluded (log2 bins)")
        ax.set_ylabel("documents")
        ax.set_title("tokens per packed document")
        return png(fig)


# --------------------------------------------------------------------------------------
# Near-duplicate texts side by side.
# --------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------
# Sections.
# --------------------------------------------------------------------------------------

def section_status(states: list[State]) -> str:
    if all(not s.ran for s in states):
        return "missing"
    if any(s.state in ("stale", "unreadable") for s in states):
        return "stale"
    if any(not s.ran for s in states):
        return "partial"
    return "ok"


def banners(run: Run, states: list[State], compact: bool = False) -> Html:
    """A box per step that is missing, stale or unreadable, naming what to run; compact:
    one box for all the missing steps and one for all the stale ones."""
    missing = [s for s in states if s.state == "missing"]
    stale = [s for s in states if s.state in ("stale", "unreadable")]
    out = []
    if compact:
        if missing:
            out.append(f'<div class="missing" data-step="{missing[0].step.key}">Not run yet: '
                       f'{esc(", ".join(s.step.label for s in missing))}. Next: '
                       f'<code>{esc(missing[0].step.command(run.data))}</code></div>')
        if stale:
            out.append(f'<div class="stale" data-step="{stale[0].step.key}"><b>Stale: '
                       f'{esc(", ".join(s.step.label for s in stale))}</b>. '
                       f'{esc(stale[0].message)}. What is shown is what is on disk.</div>')
        return Html("".join(out))
    for s in missing:
        out.append(f'<div class="missing" data-step="{s.step.key}"><b>{esc(s.step.label)}'
                   f'</b> has not run yet, so this part is empty. Run: '
                   f'<code>{esc(s.step.command(run.data))}</code></div>')
    for s in stale:
        out.append(f'<div class="stale" data-step="{s.step.key}"><b>{esc(s.step.label)} '
                   f'is {s.state}</b>: {esc(s.message)}. What is shown below is what is on '
                   f'disk, not what the current inputs would give.</div>')
    return Html("".join(out))


def missing_part(run: Run, what: str, step: Step, extra: str = "",
                 path: str | None = None) -> Html:
    """A part of the page that cannot be drawn: `what` (a file under the data folder, or
    a description with the file it comes from in `path`) is unreadable or missing."""
    gone = "is unreadable" if (run.data / (path or what)).exists() else f"is missing{extra}"
    return Html(f'<div class="missing" data-step="{step.key}">{esc(what)} {gone}. '
                f'Run: <code>{esc(step.command(run.data))}</code></div>')


def section(sid: str, title: str, status: str, body: str, show_status: bool = True) -> Html:
    return Html(f'<section id="{sid}" data-status="{status}"><h2>{esc(title)} '
                f'{badge(status) if show_status else ""}</h2>{body}</section>')


def subsection(title: str, body: str, sid: str | None = None) -> Html:
    return Html(f'<h3{f" id={sid}" if sid else ""}>{esc(title)}</h3>{body}')


# -- 1 funnel ---------------------------------------------------------------------------

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


# -- 2 cleaning -------------------------------------------------------------------------

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
        body.append(subsection("Threshold sweep", clean_sweep(run), "clean-sweep"))
    return section("cleaning", "2. Cleaning", section_status([st]), "".join(body))


# -- 3 deduplication --------------------------------------------------------------------

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


# -- 4 tokenizer ------------------------------------------------------------------------

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


# -- 5 pack and verify ------------------------------------------------------------------

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


# -- the header and the list of inputs --------------------------------------------------

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


CSS = """
:root{--ok:#2e7d32;--stale:#b26a00;--miss:#6b7280;--fail:#c0392b;--bg:#f6f7f9;--line:#dde1e6}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:#1f2933;font:14px/1.45 -apple-system,"Segoe UI",
Roboto,"Helvetica Neue",Arial,"Noto Sans","PingFang SC","Microsoft YaHei",sans-serif}
main{max-width:1220px;margin:0 auto;padding:16px 20px 60px}
header,section{background:#fff;border:1px solid var(--line);border-radius:8px;
padding:14px 20px;margin:14px 0}
h1{margin:4px 0 2px;font-size:24px}h2{font-size:19px;margin:6px 0 10px}
h3{font-size:16px;margin:22px 0 8px;border-bottom:1px solid var(--line);padding-bottom:3px}
h4{font-size:14px;margin:6px 0 2px}
.sub,.note{color:#52606d;font-size:12.5px}.figs{margin:4px 0}
code{background:#eef1f4;padding:1px 4px;border-radius:3px;font-size:12.5px;word-break:break-all}
table{border-collapse:collapse;margin:8px 0;font-size:12.5px;width:auto;max-width:100%}
th,td{border-bottom:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600}td.num,th.num{text-align:right;
font-variant-numeric:tabular-nums}tr.current td{background:#fff8e1}
.badge{display:inline-block;border-radius:9px;padding:0 8px;font-size:11.5px;font-weight:600;
color:#fff;background:var(--miss);white-space:nowrap;vertical-align:middle}
.badge.ok,.badge.pass{background:var(--ok)}.badge.stale,.badge.unreadable,.badge.warn,
.badge.partial{background:var(--stale)}.badge.fail{background:var(--fail)}
div.missing,div.stale{border-left:4px solid var(--miss);background:#f1f3f5;padding:8px 12px;
margin:8px 0;border-radius:4px}div.stale{border-color:var(--stale);background:#fff4e0}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.card{border:1px solid var(--line);border-radius:6px;padding:8px 14px;min-width:170px}
.card.good{border-color:var(--ok)}.card.bad{border-color:var(--fail)}
.ct,.cs{font-size:12px;color:#52606d}.cv{font-size:18px;font-weight:600}
.toc ol{list-style:none;padding:0;margin:0;display:flex;flex-wrap:wrap;gap:6px 18px}
.toc li{margin:2px 0}td code{word-break:normal;overflow-wrap:anywhere}
table.stages td:nth-child(4),table.stages td:nth-child(5),table.stages td:nth-child(6),
table.stages td:nth-child(7){white-space:nowrap}.next{margin:6px 0 12px}
.grid2{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:16px;align-items:start}
img.chart{max-width:100%;height:auto;display:block;margin:6px 0}
.rule{border-top:1px dashed var(--line);padding-top:8px;margin-top:12px}
.thr{font-weight:400;color:#52606d;font-family:ui-monospace,Menlo,Consolas,monospace}
pre.doc,pre.table{white-space:pre-wrap;word-break:break-word;background:#fafbfc;
border:1px solid var(--line);border-radius:4px;padding:6px 8px;margin:2px 0 8px;
font:12px/1.4 ui-monospace,Menlo,Consolas,"Noto Sans Mono CJK SC",monospace;
max-height:10em;overflow:auto}
pre.table{white-space:pre;max-height:none}
pre.diff{max-height:24em}.doc-head{font-size:12px;color:#52606d;font-weight:600}
.more,.skip{color:#8895a7;font-style:italic}.skip{background:#eef1f4}
.grid3{display:grid;grid-template-columns:repeat(3,minmax(0,1fr));gap:12px}
.pair{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:12px}
del{background:#fdd;color:#8a1c1c;text-decoration:line-through}
ins{background:#d4f7dc;color:#135e2b;text-decoration:underline}
.cluster{margin-bottom:14px}
details summary{cursor:pointer;color:#3b6ea5;margin:8px 0}
@media (max-width:900px){.grid2,.grid3,.pair{grid-template-columns:1fr}}
"""


SECTIONS = [("funnel", "1. Funnel", section_funnel),
            ("cleaning", "2. Cleaning", section_cleaning),
            ("dedup", "3. Deduplication", section_dedup),
            ("tokenizer", "4. Tokenizer", section_tokenizer),
            ("pack", "5. Pack and verify", section_pack)]

SECTION_STEPS = {"funnel": FUNNEL, "cleaning": ["clean"],
                 "dedup": ["dedup_exact", "dedup_minhash"],
                 "tokenizer": ["train_tokenizer", "compare_tokenizers"],
                 "pack": ["pack_parallel", "verify"]}


def build_section(run: Run, sid: str, title: str, fn) -> Html:
    """One section; a report file in an unexpected shape spoils that section, not the page."""
    try:
        return fn(run)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, ArithmeticError) as e:
        msg = f"{title}: could not be drawn ({type(e).__name__}: {e})"
        run.errors.append(msg)
        return section(sid, title, "error", Html(f'<div class="stale error">{esc(msg)}; '
                                                 f'rerun the stage that writes it.</div>'))


def build_page(data: Path) -> tuple[str, dict]:
    """The whole page as a string, and the run summary."""
    t0 = time.perf_counter()
    states = run_states(data)
    run = Run(data, states, Inputs(data))
    for s in STAGES:
        run.files.note_read(s.path)
    for s in TOOLS:
        if states[s.key].ran:
            run.files.note_read(s.path)
    parts = [build_section(run, sid, title, fn) for sid, title, fn in SECTIONS]
    # each section's own badge (a section may show a stale step's figures, or fail)
    toc = [(sid, title, m.group(1) if (m := re.match(r'<section id="[^"]*" data-status="(\w+)"',
                                                       part)) else
            section_status([states[k] for k in SECTION_STEPS[sid]]))
           for (sid, title, _), part in zip(SECTIONS, parts)]
    summ = run_summary(run)
    parts.append(section_sources(run, time.perf_counter() - t0))
    toc.append(("sources", "About this page", ""))
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "img-src data:; style-src 'unsafe-inline'\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{PAGE_TITLE} {esc(display_path(data))}</title>"
            f"<style>{CSS}</style></head><body><main>"
            + header(run, summ, toc) + "".join(parts) + "</main></body></html>\n")
    summ["errors"] = run.errors
    return page, summ


# --------------------------------------------------------------------------------------

def parse_args(argv):
    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", "--input", dest="data_dir", default=str(layout.DATA),
                   help="the data folder it reports on (default: data)")
    p.add_argument("--output", default=None, help=f"default: DATA_DIR/{REPORT_NAME}")
    a = p.parse_args(argv)
    if not Path(a.data_dir).is_dir():
        raise StageError(f"--data-dir {a.data_dir} is not a folder; run the pipeline first "
                         "(make demo)")
    if (Path(a.data_dir) / "manifest.json").is_file():   # raw/, cleaned/, ...: one stage's
        up = Path(a.data_dir).resolve().parent
        raise StageError(f"--data-dir {a.data_dir} is one stage's output folder (it holds a "
                         f"manifest.json); name the data folder that holds it: --data-dir "
                         f"{display_path(up)}")
    if not holds_stage_output(Path(a.data_dir)):   # an empty folder, a report subfolder
        raise StageError(f"--data-dir {a.data_dir} holds nothing a stage writes (no stage "
                         "folder with its manifest, no pack_manifest.json, no unfinished "
                         "run); name the data folder the stages wrote (default: data), or "
                         "run the pipeline first (make demo)")
    a.output = Path(a.output) if a.output else Path(a.data_dir) / REPORT_NAME
    check_report_path(a.output, "--output", ".html", PAGE_TITLE)
    return a


def holds_stage_output(data: Path) -> bool:
    """Whether any stage has written into the data folder `data`: its output with its
    manifest, or an unfinished run's staging folder (the page names it)."""
    return any((data / s.path).is_file() or unfinished_run(data, s) for s in STAGES)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    page, summ = build_page(Path(args.data_dir))
    body = page.encode("utf-8", errors="replace")
    # written under a name of its own beside the page (never a file of the user's, such
    # as report.html.tmp), then renamed over it
    tmp = temporary_beside(args.output)
    made = False
    try:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "xb") as f:
            made = True
            f.write(body)
        os.replace(tmp, args.output)
    except OSError as e:
        if made:
            tmp.unlink(missing_ok=True)
        raise StageError(f"cannot write {args.output}: {e.strerror or e}") from None
    for e in summ["errors"]:
        print(f"warning: {e}", file=sys.stderr)
    if len(body) > MAX_BYTES:
        print(f"warning: {args.output} is {len(body) / 1e6:.1f} MB, over {MAX_BYTES / 1e6:.0f} MB",
              file=sys.stderr)
    print(summary_line(summ, len(body)))
    print(f"wrote {display_path(args.output)}")
    return 0


if __name__ == "__main__":
    run_stage(main)
