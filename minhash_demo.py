"""The figures of tutorial sections 3.4 and 3.5, recomputed with the project's MinHash.

    python minhash_demo.py                          # tables + data/figures/s_curve.png
    python minhash_demo.py --out s_curve.png --trials 5000

Section 3.4: how well k minimum hash values estimate the Jaccard similarity of two
shingle sets. Sentences A and B differ in one word (true Jaccard 0.6571), C shares
nothing with A (0.0000). The estimates at k = 16, 64, 128, 256 are printed with their
absolute errors; they differ from the tutorial's own numbers because the hash functions
differ. One estimate's error need not shrink as k grows (the tutorial's: 0.0009 at
k = 128, then 0.0265 at k = 256; its "less than a thousandth" at 128 was a lucky draw):
what shrinks, as 1/sqrt(k), is the error to expect, printed beside it as the standard
error and as the mean error over 100 hash seeds.

Section 3.5: the chance that a pair of similarity s becomes an LSH candidate, P = 1 -
(1 - s^r)^b, for (b, r) = (8, 16), (16, 8), (32, 4) with k = 128. Beside each value is
the rate measured by simulation: pairs of shingle sets with exactly that Jaccard
similarity go through the real signature code and the real band hashing of
dedup_minhash.py, and we count how often some band collides. The S-curve is saved as
a PNG with the dedup threshold (0.8) marked.

There is no second MinHash here: everything is imported from algorithms/minhash.py.
"""

from __future__ import annotations

import pipeline  # noqa: F401  (first, before numpy: see pipeline/__init__.py)

import argparse
from pathlib import Path

import numpy as np

from pipeline import layout
from pipeline.disk import check_out_path
from pipeline.errors import ArgumentParser, StageError, run_stage
from pipeline.tables import table
from algorithms.minhash import (MinHasher, band_hashes, candidate_probability, jaccard, shingles,
                                similarity)

# Section 3.4's sentences, verbatim.
A = "机器学习模型的训练过程需要大量的高质量语料数据来支撑最终的效果表现"
B = "机器学习模型的训练过程需要大量的高品质语料数据来支撑最终的效果表现"
C = "今天天气不错适合出门散步顺便去公园里看看新开的那些花草树木"
KS = (16, 64, 128, 256)
SEEDS = 100   # hash seeds over which the mean error of an estimate is taken

# Section 3.5's table, verbatim: s -> P for (b, r) = (8, 16), (16, 8), (32, 4).
CONFIGS = ((8, 16), (16, 8), (32, 4))
S_VALUES = (0.30, 0.50, 0.60, 0.70, 0.80, 0.90, 0.95)
TUTORIAL_35 = {
    0.30: (0.000, 0.001, 0.229),
    0.50: (0.000, 0.061, 0.873),
    0.60: (0.002, 0.237, 0.988),
    0.70: (0.026, 0.613, 1.000),
    0.80: (0.204, 0.947, 1.000),
    0.90: (0.806, 1.000, 1.000),
    0.95: (0.990, 1.000, 1.000),
}
UNION = 400  # shingles in A ∪ B for the simulation: s * 400 is a whole, even-split number


def estimate_table(seed: int = 1, seeds: int = SEEDS) -> list[dict]:
    """Section 3.4: true Jaccard and MinHash estimates of A~B and A~C for each k, and the
    mean error of A~B's estimate over hash seeds 1..`seeds`.

    The sentences are used as they are (their normalised form is the same text)."""
    true_ab = jaccard(shingles(A), shingles(B))
    true_ac = jaccard(shingles(A), shingles(C))
    rows = []
    for k in KS:
        sa, sb, sc = MinHasher(num_perm=k, ngram=5, seed=seed).signatures([A, B, C], normalised=True)
        est_ab, est_ac = float(similarity(sa, sb)), float(similarity(sa, sc))
        errors = []
        for s in range(1, seeds + 1):
            sa2, sb2 = MinHasher(num_perm=k, ngram=5, seed=s).signatures([A, B], normalised=True)
            errors.append(abs(float(similarity(sa2, sb2)) - true_ab))
        rows.append({"k": k, "true_ab": true_ab, "est_ab": est_ab, "err_ab": abs(est_ab - true_ab),
                     "mean_err_ab": float(np.mean(errors)),
                     "true_ac": true_ac, "est_ac": est_ac, "err_ac": abs(est_ac - true_ac)})
    return rows


def pair_with_jaccard(s: float, rng: np.random.Generator, union: int = UNION):
    """Two sets of 32-bit shingle hashes whose Jaccard similarity is exactly s."""
    common = round(s * union)
    only = (union - common) // 2
    if common + 2 * only != union or abs(common / union - s) > 1e-9:
        raise ValueError(f"s={s} is not a multiple of 2/{union}")
    while True:
        x = np.unique(rng.integers(0, 2**32, size=union + 16, dtype=np.uint64))
        if len(x) >= union:
            break
    x = rng.permutation(x)[:union].astype(np.uint32)
    a = np.concatenate([x[:common], x[common:common + only]])
    b = np.concatenate([x[:common], x[common + only:]])
    return a, b


def simulate(s_values=S_VALUES, configs=CONFIGS, trials: int = 2000, seed: int = 0,
             num_perm: int = 128) -> dict[float, list[float]]:
    """Measured candidate rate for each s and (b, r): pairs of exact Jaccard s go through
    MinHasher (the real signature code) and band_hashes (the real LSH banding)."""
    mh = MinHasher(num_perm=num_perm)
    rng = np.random.default_rng(seed)
    out = {}
    for s in s_values:
        sets = []
        for _ in range(trials):
            sets.extend(pair_with_jaccard(s, rng))
        sig = mh.signatures_of_hashed_sets(sets)
        rates = []
        for b, r in configs:
            h = band_hashes(sig, b, r)          # (bands, 2 * trials)
            hit = (h[:, 0::2] == h[:, 1::2]).any(axis=0)
            rates.append(float(hit.mean()))
        out[s] = rates
    return out


def lsh_table(trials: int, seed: int = 0) -> list[dict]:
    """Section 3.5: formula, tutorial value and simulated rate for each s and (b, r)."""
    emp = simulate(trials=trials, seed=seed)
    rows = []
    for s in S_VALUES:
        for (b, r), tut, e in zip(CONFIGS, TUTORIAL_35[s], emp[s]):
            rows.append({"s": s, "b": b, "r": r, "formula": float(candidate_probability(s, b, r)),
                         "tutorial": tut, "empirical": e})
    return rows


def plot_s_curve(path: Path, threshold: float, emp_rows: list[dict]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = np.linspace(0, 1, 501)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    colors = {(8, 16): "tab:blue", (16, 8): "tab:red", (32, 4): "tab:green"}
    for b, r in CONFIGS:
        ax.plot(s, candidate_probability(s, b, r), color=colors[(b, r)], lw=2,
                label=f"b={b}, r={r}: P = 1 - (1 - s^{r})^{b}")
        pts = [(x["s"], x["empirical"]) for x in emp_rows if (x["b"], x["r"]) == (b, r)]
        ax.plot(*zip(*pts), "o", color=colors[(b, r)], ms=5, mfc="white")
    ax.axvline(threshold, color="black", ls="--", lw=1)
    p = float(candidate_probability(threshold, 16, 8))
    ax.annotate(f"threshold {threshold:g}\nb=16, r=8: P = {p:.3f}", xy=(threshold, p),
                xytext=(0.03, 0.55), arrowprops={"arrowstyle": "->"})
    ax.set_xlabel("Jaccard similarity s")
    ax.set_ylabel("P(candidate pair)")
    ax.set_title("LSH S-curves, k = b x r = 128 (points: simulated with the real code)")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.tight_layout()
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(layout.DATA / "figures" / "s_curve.png"),
                   help="where to save the S-curve PNG (default data/figures/s_curve.png)")
    p.add_argument("--trials", type=int, default=2000,
                   help="simulated pairs per similarity value (default 2000)")
    p.add_argument("--threshold", type=float, default=0.8, help="marked on the figure (default 0.8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulation (default 0)")
    args = p.parse_args(argv)
    if args.trials < 1:
        raise StageError(f"--trials {args.trials}: must be at least 1")
    if not 0 < args.threshold <= 1:
        raise StageError(f"--threshold {args.threshold}: must be in (0, 1]")
    if args.seed < 0:
        raise StageError(f"--seed {args.seed}: must be >= 0")
    out = Path(args.out)
    if out.suffix.lower() != ".png":
        raise StageError(f"--out {out}: the figure is a PNG, name it *.png")
    check_out_path("--out", out, folder=False)

    print("Section 3.4: MinHash estimates of Jaccard (5-character shingles)")
    print(f"  A = {A}\n  B = {B}\n  C = {C}")
    est = estimate_table()
    print(f"true Jaccard: A~B = {est[0]['true_ab']:.4f}, A~C = {est[0]['true_ac']:.4f}")
    print(table(["k", "estimate A~B", "|error|", "std. error", f"mean |error|, {SEEDS} seeds",
                 "estimate A~C", "|error|"],
                [[r["k"], f"{r['est_ab']:.4f}", f"{r['err_ab']:.4f}",
                  f"{np.sqrt(r['true_ab'] * (1 - r['true_ab']) / r['k']):.4f}",
                  f"{r['mean_err_ab']:.4f}", f"{r['est_ac']:.4f}", f"{r['err_ac']:.4f}"]
                 for r in est]))
    print("std. error = sqrt(J(1-J)/k): each of the k positions agrees with probability J, "
          "independently, so about two thirds of estimates fall within one std. error; one "
          "estimate's error may grow from one k to the next, the mean error shrinks as "
          "1/sqrt(k)")

    print()
    print(f"Section 3.5: P(candidate) = 1 - (1 - s^r)^b, k = 128; "
          f"'measured' = rate over {args.trials} simulated pairs per s")
    rows = lsh_table(args.trials, args.seed)
    head = ["s"]
    for b, r in CONFIGS:
        head += [f"b={b}, r={r}", "measured"]
    body = []
    mismatches = 0
    for s in S_VALUES:
        line = [f"{s:.2f}"]
        for x in (x for x in rows if x["s"] == s):
            line += [f"{x['formula']:.3f}", f"{x['empirical']:.3f}"]
            mismatches += f"{x['formula']:.3f}" != f"{x['tutorial']:.3f}"
        body.append(line)
    print(table(head, body))
    print("formula vs the tutorial's table: "
          + ("identical to three decimals" if not mismatches else f"{mismatches} values differ"))
    worst = max(abs(x["formula"] - x["empirical"]) for x in rows)
    print(f"largest |formula - measured|: {worst:.3f}")

    plot_s_curve(out, args.threshold, rows)
    print(f"saved the S-curve to {out}")
    return 0 if not mismatches else 1


if __name__ == "__main__":
    run_stage(main)
