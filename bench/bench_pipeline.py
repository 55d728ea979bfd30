"""Benchmark: the whole pipeline at default flags against the anchors chained, on the same
documents, in one run.

    python bench/bench_pipeline.py --mb 50        # the first 50 MB of the benchmark corpus
    python bench/bench_pipeline.py --mb 256

ours: download_data.py, clean.py, dedup_exact.py, dedup_minhash.py, train_tokenizer.py and
pack_parallel.py, each as a user runs it (a subprocess, default flags, every core), on
the first --mb MB of data/bench_corpus/; CPU seconds of every process of each stage (its
driver and the workers it started: bench/scale.py's run_stage), wall seconds around each
command.

the anchors chained: each step of the tutorial's own code (or the tool it names) on what
the previous anchor step kept, in this process:
  download  datasets' load_dataset("parquet") and to_parquet (tutorial 1.1)
  clean     is_clean (2.3, verbatim) and fastText lid.176 on every document's full text
  exact     the sha256 set of 3.2, verbatim
  minhash   datatrove's MinhashDedupSignature (character 5-grams, 3.6) on every document
            (signatures only: the anchors' later steps then read a few percent more text
            than ours, which removes the near duplicates)
  tokenizer BpeTrainer (4.7) on the same text ours trains on (the whole corpus below the
            stage's 1 GB floor), 32,000 ids, on every core
  pack      the tutorial's packer (5.4: tok.encode per document, EOS, np.array, tofile)
CPU seconds of each (process_time: every thread of this process).

The ratio to quote is the anchors' CPU over ours, both measured here, one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from common import CORPUS, cpu_model  # noqa: E402

STAGES = ["download_data", "clean", "dedup_exact", "dedup_minhash", "train_tokenizer",
          "pack_parallel"]


def ours(data: Path, inputs: Path, cores: int) -> dict:
    from scale import run_stage

    out = {}
    for stage in STAGES:
        r = run_stage(stage, data, inputs, cores)
        out[stage] = {"cpu_s": r["cpu_s"], "wall_s": r["wall_s"],
                      "accounted_cpu_s": r.get("accounted_cpu_s") or r["cpu_s"]}
    return out


def anchors(inputs: Path, work: Path, vocab: int = 32000) -> dict:
    import bench_clean
    import bench_dedup_exact
    import bench_minhash
    import bench_pack

    out = {}

    def timed(name, fn):
        c, w = time.process_time(), time.time()
        res = fn()
        out[name] = {"cpu_s": round(time.process_time() - c, 2),
                     "wall_s": round(time.time() - w, 2)}
        return res

    def download():
        from datasets import load_dataset

        ds = load_dataset("parquet", data_files=sorted(str(p) for p in inputs.glob("*.parquet")),
                          split="train", cache_dir=str(work / "hf_cache"))
        ds.to_parquet(str(work / "raw.parquet"))
        return ds["text"]

    texts = timed("download_data", download)
    ft = bench_clean.fasttext_model()

    def clean():
        kept = []
        for t in texts:
            labels, probs = ft.predict(t.replace("\n", " "))
            if (bench_clean.is_clean(t) and min(1.0, float(probs[0])) >= 0.8
                    and labels[0] in ("__label__en", "__label__zh")):
                kept.append(t)
        return kept

    texts = timed("clean", clean)
    texts = timed("dedup_exact", lambda: list(bench_dedup_exact.exact_dedup(texts)))
    sign = bench_minhash.datatrove_fn()
    timed("dedup_minhash", lambda: sign(texts))

    def tokenizer():
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator((texts[i:i + 1000] for i in range(0, len(texts), 1000)),
                                trainer=trainer)
        tok.save(str(work / "tokenizer.json"))

    timed("train_tokenizer", tokenizer)
    timed("pack_parallel", lambda: bench_pack.reference_pack(str(work / "tokenizer.json"),
                                                              texts, work / "train.bin"))
    return out


def medians(runs: list[dict]) -> dict:
    """Each stage's median CPU and wall seconds over several runs."""
    import statistics

    return {s: {k: round(statistics.median(r[s][k] for r in runs), 2) for k in r0
                if k in ("cpu_s", "wall_s", "accounted_cpu_s")}
            for s, r0 in runs[0].items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=50.0)
    p.add_argument("--corpus", default=str(CORPUS))
    p.add_argument("--json", default=None, help="also write the figures here")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs of each side, alternating (ours, anchors, ours, ...); each stage's "
                        "median is reported, and every run's total")
    a = p.parse_args(argv)
    from scale import corpus_prefix

    from pipeline.layout import default_workers

    cores = default_workers()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # untimed warm-up on 10 MB (enough text for a 32k vocabulary): numba's on-disk
        # cache is filled once per checkout (the first run of a fresh checkout compiles
        # the kernels); its CPU is printed apart
        corpus_prefix(Path(a.corpus), 0.01, tmp / "warm_input")
        warm = ours(tmp / "warm_data", tmp / "warm_input", cores)
        got = corpus_prefix(Path(a.corpus), a.mb / 1000, tmp / "input")
        runs_o, runs_a = [], []
        for k in range(max(1, a.repeat)):
            runs_o.append(ours(tmp / f"data{k}", tmp / "input", cores))
            shutil.rmtree(tmp / f"data{k}", ignore_errors=True)
            os.environ["RAYON_NUM_THREADS"] = str(cores)
            (tmp / f"anchors{k}").mkdir()
            runs_a.append(anchors(tmp / "input", tmp / f"anchors{k}"))
            shutil.rmtree(tmp / f"anchors{k}", ignore_errors=True)
    ours_, anch = medians(runs_o), medians(runs_a)
    rows = []
    for s in STAGES:
        rows.append([s, ours_[s]["cpu_s"], anch[s]["cpu_s"],
                     f"{anch[s]['cpu_s'] / max(ours_[s]['cpu_s'], 1e-9):.1f}x"])
    tot_o = sum(v["cpu_s"] for v in ours_.values())
    tot_a = sum(v["cpu_s"] for v in anch.values())
    rows.append(["whole pipeline", round(tot_o, 1), round(tot_a, 1), f"{tot_a / tot_o:.2f}x"])
    from pipeline.tables import table

    print(f"{got / 1e6:.0f} MB of distinct documents; {cpu_model()}; {cores} cores")
    print(table(["stage", "ours CPU s", "anchors CPU s", "anchors / ours"], rows))
    print(f"wall: ours {sum(v['wall_s'] for v in ours_.values()):.1f} s, anchors "
          f"{sum(v['wall_s'] for v in anch.values()):.1f} s")
    # what the stages' manifests account (driver and task CPU): less than what their
    # processes used, by the workers' time outside their tasks
    acc = sum(v["accounted_cpu_s"] for v in ours_.values())
    print(f"ours as the stages' manifests account it: {acc:.1f} CPU s ({tot_a / acc:.2f}x); "
          f"the table counts every process of each stage")
    if len(runs_o) > 1:
        def totals(runs):
            return ", ".join(f"{sum(v['cpu_s'] for v in r.values()):.1f}" for r in runs)
        print(f"medians of {len(runs_o)} runs a side, alternating; each run's total CPU s: "
              f"ours {totals(runs_o)}; anchors {totals(runs_a)}")
    print(f"untimed warm-up before (ours on 10 MB): {sum(v['cpu_s'] for v in warm.values()):.1f} "
          "CPU s (" + ", ".join(f"{s} {v['cpu_s']:.1f}" for s, v in warm.items()) + ")")
    if a.json:
        Path(a.json).write_text(json.dumps({"mb": got / 1e6, "cpu": cpu_model(),
                                            "ours": ours_, "anchors": anch, "warm_up": warm,
                                            "runs_ours": runs_o, "runs_anchors": runs_a},
                                           indent=1))
    return 0


if __name__ == "__main__":
    from pipeline.requirements import require

    require("bench/bench_pipeline.py", "requirements-bench.txt")
    sys.exit(main())
