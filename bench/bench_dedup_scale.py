"""Near-dedup past one machine (`make bench-dedup-scale`): dedup_minhash.py --cluster tasks
on synthetic corpora of 1M, 10M and 100M documents with planted clusters, its memory and
the bytes each phase moves, and a projection to 1B and 10B documents on a cluster.

    python bench/bench_dedup_scale.py                          # 1M, 10M, 100M at k=32
    python bench/bench_dedup_scale.py --docs 1e6,1e7 --num-perm 128 --bands 16 --rows 8
    python bench/bench_dedup_scale.py --docs 2e4 --quick       # a smoke run (the tests')

The corpus is generated a shard per process, from each document's index alone (no
download, nothing shared between the processes), 100 lowercase letters a document:
  - 85% singletons: random letters;
  - 10% (--clustered) in clusters of power-law sizes: a document's cluster is
    floor(C u^2) for a uniform u (the first clusters draw far more members, the largest
    about 0.1 sqrt(40 N)), C = N/40; each member is the cluster's text, half of them with
    one letter changed;
  - 5% (--chained) in long chains (A~B~C..., the ends far apart, the worst case for the rounds): a
    member is the window of 100 letters at a random even offset of its chain's random
    string (chains of 50,000 members over 25,000 offsets), so a document is a near
    duplicate of the ones a few offsets away and of nothing at the far end.
The documents of a cluster or a chain are spread over the whole corpus.

For each size: download_data.py --input turns the shards into the stage's input (with its
manifest), then dedup_minhash.py --cluster tasks runs as a user runs it. Reported from its
manifest: each phase's time, tasks, largest worker's peak RSS and bytes read and written
through the exchange files; the rounds; the driver's peak RSS; the disk the run used at
its peak (free space on the file system, sampled). Then, on the same verified pairs (the
candidates it keeps, at its threshold): the union-find the driver mode runs
(algorithms.minhash.union_find) and datatrove's MinhashDedupCluster, each in a process of
its own (time, peak RSS, and that it removes as many documents), up to --anchor-max docs.

The projection to 1B and 10B documents of 4 KB (--project-kb) on 64, 640 and 1,280 cores:
each phase's task CPU per document at the largest size measured, times the documents,
over the cores; the signatures at the rate of the real-text benchmark (--sig-mb-per-core,
docs/benchmarks.md); the filter at --filter-mb-per-core; bytes moved (the exchange files
as measured, the text read twice and written once, the signatures and band hashes
written) over a shared file system of --fs-gbps; --phase-overhead-s to start and end each phase; rounds grown by log2
of the size; CPU, transfers and phase starts added, not overlapped (an upper bound).
Results: bench/results/dedup_scale.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from common import cpu_model, stage_env  # noqa: E402

LETTERS = 26
DOC_CHARS = 100
CHAIN_MEMBERS = 50_000
CHAIN_STEP = 2
SHARD_DOCS = 1_000_000


def mix(x: np.ndarray, salt: int) -> np.ndarray:
    """splitmix64 of x + salt: a deterministic uniform 64-bit hash, vectorised."""
    z = x.astype(np.uint64) + np.uint64((salt * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def uniform(x: np.ndarray, salt: int) -> np.ndarray:
    return (mix(x, salt) >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def letters(keys: np.ndarray, salt: int) -> np.ndarray:
    """DOC_CHARS letters for each key (rows x DOC_CHARS), from the key alone."""
    pos = np.arange(DOC_CHARS, dtype=np.uint64)
    return (mix(keys[:, None] * np.uint64(DOC_CHARS) + pos[None, :], salt)
            % np.uint64(LETTERS)).astype(np.uint8)


def texts_of(g: np.ndarray, n_docs: int, clustered: float = 0.2,
             chained: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """The letters of documents g (rows x DOC_CHARS, as codes 0..25) and their role
    (0 singleton, 1 cluster member, 2 chain member): a share `clustered` of the corpus in
    clusters (4 documents each on average), `chained` in chains."""
    role_u = uniform(g, 1)
    role = np.where(role_u < 1 - clustered - chained, 0,
                    np.where(role_u < 1 - chained, 1, 2))
    out = letters(g, 2)                                   # singletons: their own letters
    n_clusters = max(1, round(n_docs * clustered / 4))
    n_chains = max(1, round(n_docs * chained / CHAIN_MEMBERS))
    sel = np.flatnonzero(role == 1)
    if len(sel):
        c = np.floor(n_clusters * uniform(g[sel], 3) ** 2).astype(np.uint64)
        t = letters(c, 4)
        change = (mix(g[sel], 5) & np.uint64(1)).astype(bool)
        at = (mix(g[sel], 6) % np.uint64(DOC_CHARS)).astype(np.int64)
        rows = np.flatnonzero(change)
        t[rows, at[rows]] = (t[rows, at[rows]] + 1 + (mix(g[sel][rows], 7) % np.uint64(25))
                             .astype(np.uint8)) % LETTERS
        out[sel] = t
    sel = np.flatnonzero(role == 2)
    if len(sel):
        chain = mix(g[sel], 8) % np.uint64(n_chains)
        span = CHAIN_MEMBERS // 2
        start = (mix(g[sel], 9) % np.uint64(span)) * np.uint64(CHAIN_STEP)
        pos = start[:, None] + np.arange(DOC_CHARS, dtype=np.uint64)[None, :]
        key = (chain[:, None] << np.uint64(32)) + pos
        out[sel] = (mix(key, 10) % np.uint64(LETTERS)).astype(np.uint8)
    return out, role


def write_shard(args: tuple) -> None:
    """Shard of documents lo..hi-1 of an n_docs corpus, as parquet (id, text)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lo, hi, n_docs, path, clustered, chained = args
    writer = None
    for s in range(lo, hi, 200_000):
        g = np.arange(s, min(hi, s + 200_000), dtype=np.uint64)
        codes, _ = texts_of(g, n_docs, clustered, chained)
        data = (codes + ord("a")).astype(np.uint8).tobytes()
        n = len(g)
        offs = pa.py_buffer(np.arange(0, (n + 1) * DOC_CHARS, DOC_CHARS, dtype=np.int32).tobytes())
        text = pa.StringArray.from_buffers(n, offs, pa.py_buffer(data))
        digits = (g[:, None] // (np.uint64(10) ** np.arange(9, -1, -1, dtype=np.uint64))[None, :]
                  % np.uint64(10)).astype(np.uint8) + ord("0")
        idb = np.concatenate([np.full((n, 1), ord("s"), np.uint8), digits], axis=1).tobytes()
        ioffs = pa.py_buffer(np.arange(0, (n + 1) * 11, 11, dtype=np.int32).tobytes())
        ids = pa.StringArray.from_buffers(n, ioffs, pa.py_buffer(idb))
        table = pa.table({"id": ids, "text": text})
        writer = writer or pq.ParquetWriter(path + ".tmp", table.schema, compression="zstd")
        writer.write_table(table)
    writer.close()
    os.replace(path + ".tmp", path)


def make_corpus(folder: Path, n_docs: int, workers: int, clustered: float,
                chained: float) -> float:
    from concurrent.futures import ProcessPoolExecutor

    folder.mkdir(parents=True, exist_ok=True)
    jobs = [(lo, min(n_docs, lo + SHARD_DOCS), n_docs, str(folder / f"{i:05d}.parquet"),
             clustered, chained) for i, lo in enumerate(range(0, n_docs, SHARD_DOCS))]
    t0 = time.time()
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(write_shard, jobs))
    return time.time() - t0


class DiskPeak:
    """The most the file system holding `path` filled up beyond its state at the start."""

    def __init__(self, path: Path):
        self.path, self.peak, self._stop = path, 0, threading.Event()
        self.free0 = shutil.disk_usage(path).free

    def __enter__(self):
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.wait(0.5):
            self.peak = max(self.peak, self.free0 - shutil.disk_usage(self.path).free)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """(wall s, peak RSS MB of the process, its stdout) of a command, through /usr/bin/time."""
    cp = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M", *cmd], cwd=ROOT, env=stage_env(),
                        capture_output=True, text=True)
    if cp.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed:\n{cp.stderr[-3000:]}")
    last = [x for x in cp.stderr.splitlines() if x.startswith("TIME ")][-1].split()
    return float(last[1]), float(last[2]) / 1024, cp.stdout


UNION_FIND = """
import sys, numpy as np
from algorithms.minhash import union_find
n, k, t = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
c = np.load(sys.argv[1])
pairs = np.ascontiguousarray(c[c[:, 2] / k >= t - 1e-12, :2]).astype(np.int64)
root = union_find(n, pairs)
print(int((root != np.arange(n)).sum()))
"""

DATATROVE = """
import sys, numpy as np
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupCluster
work, = sys.argv[1:2]
LocalPipelineExecutor(pipeline=[MinhashDedupCluster(
    input_folder=work + "/dups", output_folder=work + "/remove",
    config=MinhashConfig(num_buckets=1))], tasks=1, workers=1,
    logging_dir=work + "/logs").run()
import glob, os
print(sum(os.path.getsize(f) // 4 for f in glob.glob(work + "/remove/*.remove")))
"""


def anchors(out: Path, n_docs: int, k: int, threshold: float, work: Path) -> dict:
    """The driver's union-find and datatrove's MinhashDedupCluster on the verified pairs the
    run kept: time, peak RSS, documents removed."""
    cand = out / "candidates" / "pairs.npy"
    res = {}
    wall, rss, so = timed([sys.executable, "-c", UNION_FIND, str(cand), str(n_docs), str(k),
                           str(threshold)])
    res["union_find"] = {"wall_s": wall, "peak_rss_mb": rss, "removed": int(so.split()[-1])}
    c = np.load(cand)
    ok = c[c[:, 2] / k >= threshold - 1e-12, :2]
    (work / "dups").mkdir(parents=True, exist_ok=True)
    z = np.zeros(len(ok), np.uint32)
    np.column_stack([z, ok[:, 0], z, ok[:, 1]]).astype("<u4").tofile(work / "dups" / "00000.dups")
    del c, ok
    wall, rss, so = timed([sys.executable, "-c", DATATROVE, str(work)])
    res["datatrove_cluster"] = {"wall_s": wall, "peak_rss_mb": rss,
                                "removed": int(so.split()[-1])}
    shutil.rmtree(work, ignore_errors=True)
    return res


def one_size(n_docs: int, base: Path, a) -> dict:
    folder = base / f"n{n_docs}"
    shutil.rmtree(folder, ignore_errors=True)
    with DiskPeak(base) as disk:
        gen_s = make_corpus(folder / "src", n_docs, a.workers, a.clustered, a.chained)
        dl_wall, _, _ = timed([sys.executable, "download_data.py", "--input",
                               str(folder / "src"), "--output", str(folder / "raw"),
                               "--workers", str(a.workers)])
        shutil.rmtree(folder / "src")
        flags = ["--num-perm", str(a.num_perm), "--bands", str(a.bands), "--rows", str(a.rows),
                 "--workers", str(a.workers), "--cluster", "tasks"]
        if a.task_mb:
            flags += ["--task-mb", str(a.task_mb)]
        wall, rss, _ = timed([sys.executable, "dedup_minhash.py", "--input", str(folder / "raw"),
                              "--output", str(folder / "dedup"), *flags])
    m = json.loads((folder / "dedup" / "manifest.json").read_text())
    phases = m["resources"]["phases"]
    row = {"docs": n_docs, "generate_s": round(gen_s, 1), "download_s": dl_wall,
           "wall_s": wall, "driver_peak_rss_mb": rss,
           "driver_peak_rss_manifest_mb": m["resources"]["driver_peak_rss_mb"],
           "disk_peak_gb": round(disk.peak / 1e9, 2),
           "rounds": sum(1 for p in phases if p.startswith("components-r") and
                         p.endswith("large")),
           "removed": m["counts"]["removed"]["near_duplicate"],
           "clusters": m["counts"]["clusters"], "candidates": m["counts"]["candidates"],
           "phases": {p: {"tasks": v["tasks"], "wall_s": v["wall_s"],
                          "task_cpu_s": v["task_cpu_s"],
                          "max_worker_rss_mb": v["max_worker_rss_mb"],
                          "bytes_read": v.get("bytes_read"),
                          "bytes_written": v.get("bytes_written")}
                      for p, v in phases.items()},
           "timings": m["timings"]}
    if n_docs <= a.anchor_max:
        row["anchors"] = anchors(folder / "dedup", n_docs, a.num_perm, 0.8, folder / "anchors")
    shutil.rmtree(folder, ignore_errors=True)
    return row


def group(phase: str) -> str:
    if phase.startswith("components-"):
        return "components"
    return phase


def projection(row: dict, a) -> list[dict]:
    """1B and 10B documents of --project-kb on 64, 640 and 1,280 cores, from the per-document
    task CPU and bytes of the largest size measured."""
    n = row["docs"]
    per_doc_cpu, per_doc_bytes = {}, {}
    for p, v in row["phases"].items():
        if p in ("signatures", "filter"):
            continue
        g = group(p)
        per_doc_cpu[g] = per_doc_cpu.get(g, 0) + v["task_cpu_s"] / n
        per_doc_bytes[g] = per_doc_bytes.get(g, 0) + ((v["bytes_read"] or 0)
                                                      + (v["bytes_written"] or 0)) / n
    out = []
    for docs in (1e9, 1e10):
        grow = math.log2(docs) / math.log2(n)     # rounds grow with log2 of the size
        text = docs * a.project_kb * 1024
        for cores in (64, 640, 1280):
            sig = text / (a.sig_mb_per_core * 1e6 * cores)
            filt = text / (a.filter_mb_per_core * 1e6 * cores)
            cpu = sum(c * docs * (grow if g == "components" else 1)
                      for g, c in per_doc_cpu.items()) / cores
            # the exchange files, as measured; and the text, read by the signatures and by
            # the filter and written by it, with the signatures and band hashes written
            moved = (sum(b * docs * (grow if g == "components" else 1)
                         for g, b in per_doc_bytes.items())
                     + 3 * text + docs * (4 * a.num_perm + 8 * a.bands))
            io = moved / (a.fs_gbps * 1e9)
            phases = len(row["phases"]) + (grow - 1) * 2 * row["rounds"]
            overhead = phases * a.phase_overhead_s
            total = sig + filt + cpu + io + overhead   # no overlap assumed: an upper bound
            out.append({"docs": docs, "cores": cores, "signatures_min": sig / 60,
                        "phases_cpu_min": cpu / 60, "moved_tb": moved / 1e12,
                        "moved_min": io / 60, "filter_min": filt / 60,
                        "phases": round(phases), "overhead_min": overhead / 60,
                        "total_min": total / 60})
    return out


def markdown(rows: list[dict], proj: list[dict], a) -> str:
    lines = ["# dedup_minhash.py --cluster tasks at scale", "",
             f"CPU: {cpu_model()}; {os.cpu_count()} cores; --workers {a.workers}; "
             f"k={a.num_perm} (b={a.bands}, r={a.rows})", "",
             "| documents | wall s | driver peak RSS MB | largest task MB | rounds | "
             "candidates | removed | disk peak GB |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        big = max((v["max_worker_rss_mb"] or 0) for v in r["phases"].values())
        lines.append(f"| {r['docs']:,} | {r['wall_s']:.1f} | {r['driver_peak_rss_manifest_mb']:.0f} | "
                     f"{big:.0f} | {r['rounds']} | {r['candidates']:,} | {r['removed']:,} | "
                     f"{r['disk_peak_gb']:.1f} |")
    lines += ["", "Per phase (largest size): tasks, wall s, task CPU s, largest task MB, "
              "MB read, MB written", "",
              "| phase | tasks | wall s | CPU s | task MB | read MB | written MB |",
              "|---|---|---|---|---|---|---|"]
    big = rows[-1]
    for p, v in big["phases"].items():
        rd = "" if v["bytes_read"] is None else f"{v['bytes_read'] / 1e6:,.0f}"
        wr = "" if v["bytes_written"] is None else f"{v['bytes_written'] / 1e6:,.0f}"
        lines.append(f"| {p} | {v['tasks']} | {v['wall_s']:.1f} | {v['task_cpu_s']:.1f} | "
                     f"{v['max_worker_rss_mb'] or 0:.0f} | {rd} | {wr} |")
    anchored = [r for r in rows if "anchors" in r]
    if anchored:
        lines += ["", "Clustering the same verified pairs in one process:", "",
                  "| documents | tasks (components phases) s | union-find s | union-find MB | "
                  "datatrove MinhashDedupCluster s | datatrove MB | removed (all three) |",
                  "|---|---|---|---|---|---|---|"]
        for r in anchored:
            comp = sum(v["wall_s"] for p, v in r["phases"].items() if p.startswith("components-"))
            u, d = r["anchors"]["union_find"], r["anchors"]["datatrove_cluster"]
            same = "same" if u["removed"] == d["removed"] == r["removed"] else (
                f"{r['removed']:,} / {u['removed']:,} / {d['removed']:,}")
            lines.append(f"| {r['docs']:,} | {comp:.1f} | {u['wall_s']:.1f} | "
                         f"{u['peak_rss_mb']:.0f} | {d['wall_s']:.1f} | {d['peak_rss_mb']:.0f} | "
                         f"{same} |")
    lines += ["", f"Projection ({a.project_kb:g} KB a document; signatures at "
              f"{a.sig_mb_per_core:g} MB/s a core, the filter at {a.filter_mb_per_core:g}; "
              f"a shared file system of {a.fs_gbps:g} GB/s; {a.phase_overhead_s:g} s to start "
              f"and end a phase; from the {big['docs']:,}-document run; no overlap of CPU, "
              "transfers and phase starts):", "",
              "| documents | cores | signatures min | other phases min (CPU) | moved TB | "
              "moved min | phases | their starts min | filter min | total min |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for p in proj:
        lines.append(f"| {p['docs']:.0e} | {p['cores']:,} | {p['signatures_min']:.1f} | "
                     f"{p['phases_cpu_min']:.1f} | {p['moved_tb']:.2f} | {p['moved_min']:.1f} | "
                     f"{p['phases']} | {p['overhead_min']:.1f} | {p['filter_min']:.1f} | "
                     f"{p['total_min']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", default="1e6,1e7,1e8")
    # k=16 by default: 100M signatures at the tutorial's k=128 are 51 GB, more than the disk
    # of the machine the published figures come from; --num-perm 128 --bands 16 --rows 8
    # for the tutorial's settings
    p.add_argument("--num-perm", type=int, default=16)
    p.add_argument("--bands", type=int, default=4)
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--clustered", type=float, default=0.10,
                   help="share of documents in planted clusters (default 0.10)")
    p.add_argument("--chained", type=float, default=0.05,
                   help="share of documents in planted chains (default 0.05)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--task-mb", type=float, default=None)
    p.add_argument("--anchor-max", type=float, default=1e7,
                   help="run the one-process anchors up to this many documents")
    p.add_argument("--work", default=str(ROOT / "data" / "bench_dedup_scale"))
    p.add_argument("--project-kb", type=float, default=4.0)
    # dedup_minhash.py's signature and filter tasks on 256 MB of the benchmark corpus (CPU s
    # of their tasks in its manifest): docs/benchmarks.md#near-dedup-past-one-machine
    p.add_argument("--sig-mb-per-core", type=float, default=56.0)
    p.add_argument("--filter-mb-per-core", type=float, default=118.0)
    p.add_argument("--fs-gbps", type=float, default=10.0,
                   help="aggregate bandwidth of the shared file system, GB/s (default 10)")
    p.add_argument("--phase-overhead-s", type=float, default=5.0,
                   help="seconds the executor takes to start and end a phase (default 5)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "dedup_scale"))
    p.add_argument("--again", metavar="JSON", default=None,
                   help="measure nothing: the tables and projection again from the rows of an "
                        "earlier run's JSON (its settings), with this run's assumptions")
    a = p.parse_args(argv)
    if a.again:
        old = json.loads(Path(a.again).read_text())
        for key in ("num_perm", "bands", "rows", "workers"):
            setattr(a, key, old["args"][key])
        print(write_results(a, old["rows"], old["cpu"], {**old["args"], **vars(a)}))
        return 0
    sizes = [int(float(x)) for x in a.docs.split(",")]
    base = Path(a.work)
    base.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in sizes:
        print(f"{n:,} documents ...", file=sys.stderr, flush=True)
        rows.append(one_size(n, base, a))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "phases"}), file=sys.stderr)
        md = write_results(a, rows, cpu_model(), vars(a))   # after every size: a long run
    print(md)                                              # shows its way
    return 0


def write_results(a, rows: list[dict], cpu: str, args: dict) -> str:
    """OUT.json (the rows, the projection from the largest, the settings) and OUT.md;
    returns the Markdown."""
    proj = projection(rows[-1], a)
    md = markdown(rows, proj, a)
    Path(a.out + ".json").write_text(json.dumps({"cpu": cpu, "rows": rows, "projection": proj,
                                                 "args": args}, indent=1))
    Path(a.out + ".md").write_text(md)
    return md


if __name__ == "__main__":
    sys.exit(main())
