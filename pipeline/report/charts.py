"""The page's figures: small matplotlib charts (Agg backend, no pyplot state) as base64 PNG
data URIs, each drawn from counts a stage saved, and the counts their captions give.
"""

from __future__ import annotations

import base64
import io

import numpy as np
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from pipeline.report.html import fmt
from pipeline.tables import human_bytes

DPI = 100                    # figures: modest resolution keeps the page small

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
