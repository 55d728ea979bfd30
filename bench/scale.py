"""Scale benchmark (`make bench-scale`): the whole pipeline at default flags on growing
prefixes of the benchmark corpus, and a projection to FineWeb-Edu sample-10BT.

    python bench/scale.py                       # 0.25, 0.5 and 1 GB of data/bench_corpus
    python bench/scale.py --gb 0.25,0.5,1,2     # larger sizes
    python bench/scale.py --gb 0.05 --quick     # a smoke run (what the tests call)

For each size it writes the first N GB of the corpus (distinct real documents, built by
scripts/build_bench_corpus.py) as parquet files, then runs download_data.py --input,
clean.py, dedup_exact.py, dedup_minhash.py, train_tokenizer.py, pack_parallel.py and
verify.py one after the other, each as a user would, with default flags (all cores).
For each stage it reports:

- wall time, measured around the command;
- CPU time: every process of the stage, the driver (all its threads) and each worker it
  started (getrusage of the children it waited for). The stage's own account, its
  manifest's driver CPU plus its tasks' CPU (pipeline.progress; verify_report.json for
  verify.py), leaves out the workers' time outside their tasks and the driver's after
  it wrote the manifest: 0.07-0.11 s a stage at 0.25 GB, whatever its tasks. It is kept beside
  (accounted_cpu_s), and the larger of the two is used;
- peak RSS of the driver and of the largest worker;
- core use = CPU / (cores x wall), and each parallel phase's own core use;
- the driver's memory per document: the growth of its peak RSS per document between the
  smallest and the largest size (its fixed cost removed);
- the exponent of wall time against size (a least-squares slope on log-log axes).

The projection to sample-10BT (28.5 GB) treats every stage as reading all 28.5 GB
(FineWeb-Edu is filtered already: clean and dedup remove far less of it than of this
corpus, so this is an upper bound). It splits each stage into its parallel phases
(task CPU, which divides by the cores at the core use measured here) and the rest
(driver time, which does not). Each of the two is split into a fixed part and a part
per byte by the line through the smallest and the largest size (starting the
interpreter, loading models and kernels, and checks on a capped sample do not grow
with the corpus; scaling them too, as "all per byte" does, overstated sample-10BT by
about a sixth), and the per-byte part is scaled to 28.5 GB; train_tokenizer's training,
and its sample tasks' word counting (recorded apart in its manifest), scale with its
sample, 5% of the corpus with a 1 GB floor and a 2 GB cap (section 4.7), not with the
corpus. With three sizes or more, the projection is tested: the
largest size's wall time, predicted from the two below it, beside the one measured.
Results go to bench/results/scale.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from common import stage_env  # noqa: E402

FINEWEB_BYTES = 28.5e9
CORPUS = ROOT / "data" / "bench_corpus"
STAGES = ["download_data", "clean", "dedup_exact", "dedup_minhash", "train_tokenizer",
          "pack_parallel", "verify"]
MANIFEST = {"download_data": "raw/manifest.json", "clean": "cleaned/manifest.json",
            "dedup_exact": "dedup_exact/manifest.json", "dedup_minhash": "dedup/manifest.json",
            "train_tokenizer": "tokenizer/manifest.json", "pack_parallel": "pack_manifest.json"}


def stage_command(stage: str, data: Path, inputs: Path, quick: bool = False) -> list[str]:
    """The command a user types for each stage, on the layout under `data` (default flags;
    a --quick smoke run trains an 8,000-id tokenizer, as make demo does, since a few MB
    cannot support 32,000)."""
    io = {"download_data": ["--input", str(inputs), "--output", str(data / "raw")],
          "clean": ["--input", str(data / "raw"), "--output", str(data / "cleaned")],
          "dedup_exact": ["--input", str(data / "cleaned"), "--output", str(data / "dedup_exact")],
          "dedup_minhash": ["--input", str(data / "dedup_exact"), "--output", str(data / "dedup")],
          "train_tokenizer": ["--input", str(data / "dedup"), "--output", str(data / "tokenizer")],
          "pack_parallel": ["--input", str(data / "dedup"), "--tokenizer",
                            str(data / "tokenizer" / "tokenizer.json"), "--output", str(data)],
          "verify": ["--data-dir", str(data)]}[stage]
    if quick and stage == "train_tokenizer":
        io += ["--vocab-size", "8000"]
    return [sys.executable, str(ROOT / f"{stage}.py"), *io]


def corpus_prefix(corpus: Path, gb: float, out: Path) -> int:
    """Copy the first `gb` GB of text of the corpus into parquet files under `out`
    (whole shards, then part of the next, in corpus order); returns the text bytes."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipeline.shards import list_shards

    out.mkdir(parents=True, exist_ok=True)
    want, got = gb * 1e9, 0
    for shard in list_shards(corpus):
        if got >= want:
            break
        t = pq.read_table(shard, columns=["id", "text"])
        sizes = np.cumsum(pc.binary_length(t.column("text")).to_numpy(zero_copy_only=False))
        n = int(np.searchsorted(sizes, want - got, side="left")) + 1
        t = t.slice(0, min(n, t.num_rows))
        pq.write_table(t, out / shard.name, compression="zstd")
        got += int(pc.sum(pc.binary_length(t.column("text"))).as_py())
    if got < want * 0.98:
        raise SystemExit(f"{corpus} holds only {got / 1e9:.2f} GB of text, not {gb} GB: "
                         "build a larger corpus (scripts/build_bench_corpus.py --target-gb)")
    return got


def children_cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime, r.ru_maxrss / 1024


def run_stage(stage: str, data: Path, inputs: Path, cores: int, quick: bool = False) -> dict:
    """Run one stage as a subprocess; its wall, CPU, memory and core use."""
    cpu0, _ = children_cpu()
    t0 = time.time()
    cp = subprocess.run(stage_command(stage, data, inputs, quick), cwd=ROOT, capture_output=True,
                        text=True, env=stage_env())
    wall = time.time() - t0
    cpu1, rss = children_cpu()
    if cp.returncode not in (0, 1) or (cp.returncode == 1 and stage != "verify"):
        raise SystemExit(f"{stage} failed ({cp.returncode}):\n{cp.stderr[-3000:]}")
    res = {"stage": stage, "wall_s": round(wall, 2)}
    if stage in MANIFEST:
        m = json.loads((data / MANIFEST[stage]).read_text())
        r = m.get("resources") or {}
        res["driver_rss_mb"] = r.get("driver_peak_rss_mb")
        res["worker_rss_mb"] = r.get("max_worker_rss_mb")
        res["driver_bytes_per_doc"] = r.get("driver_bytes_per_doc")
        res["timings"] = m.get("timings", {})
        # train_tokenizer's sample tasks count the sample's words: that part of their CPU
        # follows the sample's size, not the corpus's
        res["word_count_cpu_s"] = (m.get("sample") or {}).get("word_count_cpu_s")
        c = m.get("counts", {})
        res["docs"] = c.get("docs_in", c.get("rows"))
        res["bytes_out"] = c.get("bytes_out")
    else:  # verify.py: no manifest; its report carries the same resources
        r = (json.loads((data / "verify_report.json").read_text()).get("resources") or {})
        res["driver_rss_mb"] = r.get("driver_peak_rss_mb", round(rss, 1))
        res["worker_rss_mb"] = max((p.get("max_worker_rss_mb") or 0
                                    for p in (r.get("phases") or {}).values()), default=None)
        res["verify_pass"] = cp.returncode == 0
    res["accounted_cpu_s"] = round(r.get("driver_cpu_s", 0) + r.get("worker_cpu_s", 0), 2) \
        if r else None
    res["cpu_s"] = round(max(cpu1 - cpu0, res["accounted_cpu_s"] or 0), 2)
    res["phases"] = {k: {"wall_s": v.get("wall_s"), "task_cpu_s": v.get("task_cpu_s"),
                         "core_use": v.get("core_use"), "tasks": v.get("tasks")}
                     for k, v in (r.get("phases") or {}).items()}
    res["core_use"] = round(res["cpu_s"] / (cores * wall), 3) if wall else None
    return res


# The stage whose output each stage reads.
READS = {"clean": "download_data", "dedup_exact": "clean", "dedup_minhash": "dedup_exact",
         "train_tokenizer": "dedup_minhash", "pack_parallel": "dedup_minhash",
         "verify": "dedup_minhash"}


def input_bytes(stages: list[dict], corpus_bytes: int) -> dict[str, int]:
    """Text bytes each stage read: the corpus for download_data, else its upstream's output."""
    by = {s["stage"]: s for s in stages}
    return {s["stage"]: (corpus_bytes if s["stage"] not in READS
                         else by[READS[s["stage"]]].get("bytes_out") or corpus_bytes)
            for s in stages}


def driver_bytes_per_doc(runs: list[dict], i: int) -> float | None:
    """The driver's peak RSS growth per document between the smallest and largest size:
    what the driver holds per document, with its fixed cost (imports, buffers) removed."""
    def docs(run):
        st = run["stages"][i]
        return st.get("docs") or next((s.get("docs") for s in run["stages"]
                                       if s["stage"] == "pack_parallel"), None)
    a, b = runs[0], runs[-1]
    da, db = docs(a), docs(b)
    ra, rb = a["stages"][i].get("driver_rss_mb"), b["stages"][i].get("driver_rss_mb")
    if None in (da, db, ra, rb) or db <= da:
        return None
    return max(0.0, (rb - ra) * 2**20 / (db - da))


def exponent(sizes: list[float], walls: list[float]) -> float | None:
    """Slope of log(wall) against log(size): 1.0 is linear."""
    if len(sizes) < 2:
        return None
    return float(np.polyfit(np.log(sizes), np.log(walls), 1)[0])


def tokenizer_sample(total: float) -> float:
    """train_tokenizer.py's default sample: 5% of the corpus, at least 1 GB (or all of a
    smaller corpus), at most 2 GB."""
    return min(max(0.05 * total, min(1e9, total)), 2e9)


def _parts(r: dict) -> tuple[float, float, float, float]:
    """One stage run as (serial s, parallel task CPU s, training s, the parallel phases'
    core use): serial is the wall time outside the parallel phases (and, for
    train_tokenizer, outside training, which scales with its sample, not the corpus)."""
    par_wall = sum(p["wall_s"] or 0 for p in r["phases"].values())
    par_cpu = sum(p["task_cpu_s"] or 0 for p in r["phases"].values())
    use = [p["core_use"] for p in r["phases"].values() if p.get("core_use")]
    eff = min(1.0, max(use) if use else 1.0)   # the parallel phases' core use, measured
    train = (r.get("timings") or {}).get("train", 0) if r["stage"] == "train_tokenizer" else 0
    par_cpu -= r.get("word_count_cpu_s") or 0    # scaled with the sample, by project()
    return max(0.0, r["wall_s"] - par_wall - train), par_cpu, train, eff


def _line(x0: float, y0: float, x1: float, y1: float) -> tuple[float, float]:
    """(fixed, per byte) through two measured points, neither negative; a slope the
    noise made negative, or a fixed part that would be, falls back to a line through
    the origin and the larger point (all cost per byte: the upper bound)."""
    if x1 <= x0:
        return 0.0, y1 / x1 if x1 else 0.0
    b = (y1 - y0) / (x1 - x0)
    a = y1 - b * x1
    if b < 0 or a < 0:
        return 0.0, y1 / x1
    return a, b


def project(r: dict, size: float, cores: int, target: float = FINEWEB_BYTES,
            small: dict | None = None, small_size: float | None = None) -> float:
    """Minutes for `target` bytes on `cores` cores, from one stage's run on `size` bytes.

    Without `small`, every second scales linearly in bytes (the fixed costs too: an upper
    bound). With a run on fewer bytes (`small`, `small_size`), the serial seconds and
    the task CPU are each split into a fixed part and a part per byte, by the line
    through the two runs: starting the interpreter, loading models and kernels, the
    tasks' start-up and checks on a capped sample do not grow with the corpus."""
    serial, par_cpu, train, eff = _parts(r)
    if small is not None and small_size:
        s0, p0, _, _ = _parts(small)
        sa, sb = _line(small_size, s0, size, serial)
        pa, pb = _line(small_size, p0, size, par_cpu)
    else:
        sa, sb, pa, pb = 0.0, serial / size, 0.0, par_cpu / size
    t = sa + sb * target + (pa + pb * target) / (cores * eff)
    if r["stage"] == "train_tokenizer":
        grow = tokenizer_sample(target) / tokenizer_sample(size)
        t += train * grow + (r.get("word_count_cpu_s") or 0) * grow / (cores * eff)
    return t / 60


def check_projection(runs: list[dict], cores: int) -> list[list] | None:
    """The projection's own test, on this machine: each stage's wall time at the largest
    size, predicted from the two sizes below it (fixed + per byte) and from the one
    right below (all per byte), beside the wall time measured. None with fewer than
    three sizes."""
    if len(runs) < 3:
        return None
    a, b, c = runs[-3], runs[-2], runs[-1]
    ra, rb, rc = (input_bytes(x["stages"], x["bytes"]) for x in (a, b, c))
    rows, tot = [], [0.0, 0.0, 0.0]
    for i, stage in enumerate(STAGES):
        sa, sb, sc = a["stages"][i], b["stages"][i], c["stages"][i]
        fit = 60 * project(sb, rb[stage], cores, rc[stage], small=sa, small_size=ra[stage])
        lin = 60 * project(sb, rb[stage], cores, rc[stage])
        got = sc["wall_s"]
        tot = [tot[0] + fit, tot[1] + lin, tot[2] + got]
        rows.append([stage, fmt(fit), fmt(lin), fmt(got)])
    rows.append(["total", fmt(tot[0]), fmt(tot[1]), fmt(tot[2])])
    rows.append(["error of the total", f"{tot[0] / tot[2] - 1:+.1%}", f"{tot[1] / tot[2] - 1:+.1%}", ""])
    return rows


# Issue targets this benchmark checks: at 200 MB and above these phases keep at least
# 80% of the cores busy, and the pipeline on sample-10BT is projected within 45 minutes
# on 2 cores and 12 at 64.
BUSY_PHASES = [("clean", "clean"), ("dedup_exact", "hash"), ("dedup_exact", "filter"),
               ("dedup_minhash", "signatures"), ("dedup_minhash", "filter"),
               ("pack_parallel", "encode")]
MIN_CORE_USE = 0.80
MIN_GB_FOR_CORE_USE = 0.2
MAX_PROJECTED_MIN_2_CORES = 45.0
MAX_PROJECTED_MIN_64_CORES = 12.0


def check_targets(runs: list[dict], projected_2_cores: float,
                  projected_64_cores: float) -> list[list]:
    """One row per target: what was measured (the worst size), the target, ok or MISSED."""
    rows = []
    big = [r for r in runs if r["bytes"] >= MIN_GB_FOR_CORE_USE * 1e9]
    for stage, phase in BUSY_PHASES:
        uses = [(ph.get("core_use"), r["gb"]) for r in big for s in r["stages"]
                if s["stage"] == stage for name, ph in s["phases"].items() if name == phase]
        uses = [(u, gb) for u, gb in uses if u is not None]
        if not uses:
            rows.append([f"{stage} {phase}: core use", "not measured (no size >= 0.2 GB)",
                         f">= {MIN_CORE_USE:.2f}", "-"])
            continue
        worst, gb = min(uses)
        rows.append([f"{stage} {phase}: core use", f"{worst:.2f} (at {gb:g} GB)",
                     f">= {MIN_CORE_USE:.2f}", "ok" if worst >= MIN_CORE_USE else "MISSED"])
    for cores, got, most in ((2, projected_2_cores, MAX_PROJECTED_MIN_2_CORES),
                             (64, projected_64_cores, MAX_PROJECTED_MIN_64_CORES)):
        rows.append([f"sample-10BT projected on {cores} cores", f"{got:.1f} min",
                     f"<= {most:.0f} min", "ok" if got <= most else "MISSED"])
    return rows


def fmt(x, nd=1):
    return "-" if x is None else f"{x:,.{nd}f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gb", default="0.25,0.5,1", help="corpus sizes in GB (default 0.25,0.5,1)")
    p.add_argument("--corpus", default=str(CORPUS), help="parquet shards of distinct documents")
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    p.add_argument("--keep", action="store_true", help="keep the scratch data")
    p.add_argument("--quick", action="store_true", help="smoke run: tiny sizes allowed")
    p.add_argument("--from-json", default=None,
                   help="no runs: the tables and the projection again from a scale.json")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "bench"))
    from common import cpu_model

    from pipeline.layout import default_workers
    from pipeline.tables import table

    sizes_gb = [float(x) for x in args.gb.split(",")]
    corpus = Path(args.corpus)
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        sizes_gb, corpus = [], None
    elif not corpus.exists():
        raise SystemExit(f"{corpus} not found: build it with scripts/build_bench_corpus.py")
    cores = default_workers()
    work = Path(args.work) if args.work else Path(os.environ.get("TMPDIR", "/tmp")) / "bench_scale"
    if not args.from_json:
        shutil.rmtree(work, ignore_errors=True)
    cpu_name = cpu_model()
    if args.from_json:
        cores, cpu_name = saved["cores"], saved["cpu"]
    print(f"cores: {cores} ({cpu_name})", flush=True)
    runs = []
    for gb in sizes_gb:
        d = work / f"{gb:g}GB"
        inputs = d / "input"
        nbytes = corpus_prefix(corpus, gb, inputs)
        print(f"\n== {gb:g} GB ({nbytes / 1e9:.3f} GB of text)", flush=True)
        res = []
        for stage in STAGES:
            r = run_stage(stage, d / "data", inputs, cores, args.quick)
            print(f"  {stage:16s} {r['wall_s']:8.1f} s wall  {r['cpu_s']:8.1f} s CPU  "
                  f"core use {fmt(r['core_use'], 2)}", flush=True)
            res.append(r)
        runs.append({"gb": gb, "bytes": nbytes, "stages": res})
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)
    if args.from_json:
        runs = saved["runs"]

    sizes = [r["bytes"] for r in runs]
    head = ["stage"] + [f"{r['gb']:g} GB wall s" for r in runs] + [
        "CPU s", "core use", "driver RSS MB", "driver B/doc", "worker RSS MB", "exponent"]
    rows, proj, linear = [], [], []
    last = runs[-1]
    for i, stage in enumerate(STAGES):
        walls = [r["stages"][i]["wall_s"] for r in runs]
        lr = last["stages"][i]
        rows.append([stage] + [fmt(w) for w in walls] + [
            fmt(lr["cpu_s"]), fmt(lr["core_use"], 2), fmt(lr.get("driver_rss_mb"), 0),
            fmt(driver_bytes_per_doc(runs, i), 0), fmt(lr.get("worker_rss_mb"), 0), fmt(exponent(sizes, walls), 2)])
        # Each stage is projected as if it read all 28.5 GB: FineWeb-Edu is filtered
        # already, so clean and dedup remove far less of it than of this corpus.
        read = input_bytes(last["stages"], last["bytes"])[stage]
        first = runs[0]
        small = dict(small=first["stages"][i],
                     small_size=input_bytes(first["stages"], first["bytes"])[stage]) \
            if len(runs) > 1 else {}
        proj.append([stage] + [project(lr, read, c, **small) for c in (2, 16, 64)])
        linear.append([project(lr, read, c) for c in (2, 16, 64)])
    total = [sum(p[k] for p in proj) for k in (1, 2, 3)]
    total_linear = [sum(p[k] for p in linear) for k in (0, 1, 2)]
    phases = []
    for i, stage in enumerate(STAGES):
        for name, ph in last["stages"][i]["phases"].items():
            phases.append([stage, name, ph["tasks"], fmt(ph["wall_s"]), fmt(ph["task_cpu_s"]),
                           fmt(ph["core_use"], 2)])
    text = [f"cores: {cores} ({cpu_name})", "", table(head, rows), "",
            f"parallel phases at {last['gb']:g} GB:",
            table(["stage", "phase", "tasks", "wall s", "task CPU s", "core use"], phases), "",
            "projected wall time for FineWeb-Edu sample-10BT (28.5 GB), minutes, each stage "
            "scaled from the bytes it read here to all 28.5 GB (nothing removed upstream: an "
            "upper bound); its serial seconds and its tasks' CPU each split into a fixed part "
            "and a part per byte by the line through the smallest and the largest size;",
            "share of the corpus's bytes each stage read here: " + ", ".join(
                f"{st} {100 * (b / last['bytes']):.0f}%"
                for st, b in input_bytes(last["stages"], last["bytes"]).items()),
            table(["stage", "2 cores", "16 cores", "64 cores"],
                  [[p[0]] + [fmt(x) for x in p[1:]] for p in proj]
                  + [["total"] + [fmt(x) for x in total]]
                  + [["total, all per byte"] + [fmt(x) for x in total_linear]]), ""]
    checked = check_projection(runs, cores)
    if checked:
        text += [f"the projection tested here: wall s at {last['gb']:g} GB predicted from the "
                 "two sizes below (fixed + per byte) and from the one below (all per byte)",
                 table(["stage", "fixed + per byte", "all per byte", "measured"], checked), ""]
    targets = check_targets(runs, total[0], total[2])
    text += ["targets:", table(["target", "measured", "wanted", ""], targets)]
    print("\n" + "\n".join(text))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "scale_quick" if args.quick else "scale"
    cmd = "python bench/scale.py " + " ".join(argv if argv is not None else sys.argv[1:])
    (out / f"{name}.md").write_text(f"Command: `{cmd.strip()}`\n\n```\n" + "\n".join(text) + "\n```\n")
    (out / f"{name}.json").write_text(json.dumps({"cpu": cpu_name, "cores": cores, "runs": runs,
                                                  "projection_minutes": proj,
                                                  "projection_all_per_byte": total_linear,
                                                  "projection_check": checked,
                                                  "targets": targets}, indent=2))
    if not args.keep and not args.work:
        shutil.rmtree(work, ignore_errors=True)
    missed = [t for t in targets if t[-1] == "MISSED"]
    return 1 if missed and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
