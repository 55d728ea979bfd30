"""Decontamination: the n-gram index of the user's evaluation sets, clean.py's decontaminate
rule (both engines), its report, verify.py's item 11, and agreement with datatrove's
NGramsDecontFilter, on the bundled sample with planted items."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import data_files, run_script, snapshot

from algorithms import decontamination as D
from algorithms import decontamination_fast as F

SAMPLE = "data/sample/sample.parquet"

# Evaluation items nobody's corpus holds (written for this test), English and Chinese.
ITEMS = [
    {"question": "In the fictional kingdom of Varnholt, which river did the glassmakers' "
                 "guild divert in the spring of its founding year to cool the furnaces?",
     "answer": "They diverted the Ostrel, a cold mountain river that ran past the northern "
               "quarry and froze solid every second winter."},
    {"question": "According to the ledger of the lighthouse keeper Amalia Brisk, how many "
                 "ships passed the southern reef during the storm season of the old calendar?",
     "answer": "Her ledger counts forty seven ships, all of them flying the green pennant of "
               "the salt traders from the eastern islands."},
    {"question": "What colour were the lanterns that the orchard growers of Pellow hung "
                 "along the terraces to warn travellers about the loose stones?",
     "answer": "The growers hung amber lanterns with copper hoods, lit from dusk until the "
               "last cart had crossed the upper bridge."},
    {"question": "Which instrument did the archivist of the drowned library use to measure "
                 "the damp in the lowest stacks before the manuscripts were moved?",
     "answer": "A hair hygrometer built from a single strand of horse hair stretched across "
               "a brass frame with a painted dial."},
    {"question": "在虚构的青石镇上，老陶匠每年春天用哪一种泥土烧制祭祀用的大缸？",
     "answer": "他只用镇子北边河湾里挖出的红色黏土，晒干四十天以后才肯入窑烧制。"},
]


# An item whose answer is shorter than n: only the n-grams across its question's end and
# its answer's start reveal it.
SHORT = {"question": "Which of the following did the ferryman of the grey lake keep under his "
                     "bench for the crossing in the winter months of the old story?",
         "answer": "A wool blanket"}


def _sample_texts(lang_filter=None, k=40, seed=0):
    texts = pq.read_table(SAMPLE).column("text").to_pylist()
    rng = np.random.default_rng(seed)
    out = []
    for i in rng.permutation(len(texts)):
        t = texts[i]
        cjk = bool(re.search(r"[\u4e00-\u9fff]", t))
        if len(t) > 800 and (lang_filter is None or lang_filter == cjk):
            out.append(t)
        if len(out) == k:
            break
    return out


def planted_docs() -> list[dict]:
    """The sample's documents, and documents with the items planted in five ways, and
    documents that share only a common run of fewer than 13 words with an item."""
    en, zh = _sample_texts(False), _sample_texts(True, 10)
    docs = [{"id": f"sample-{i}", "text": t} for i, t in enumerate(en + zh)]
    for k, it in enumerate(ITEMS[:4]):
        q, a = it["question"], it["answer"]
        docs += [
            {"id": f"plant-verbatim-{k}", "text": f"{q} {a}"},
            {"id": f"plant-case-{k}", "text": re.sub(r" ", lambda m: "\n\t " if k % 2 else "   ",
                                                     f"{q.upper()} {a.swapcase()}")},
            {"id": f"plant-embedded-{k}",
             "text": en[k][:1500] + f" Quiz time. {q} Answer: {a} " + en[k + 1][:1500]},
            {"id": f"plant-paragraphs-{k}", "text": f"{en[k + 2][:600]}\n\n{q}\n\n{a}\n\n"
                                                    f"{en[k + 3][:600]}"},
            {"id": f"near-{k}",    # 12 words of the answer, in a document of its own
             "text": en[k + 4][:800] + " " + " ".join(a.split()[:12]) + " " + en[k + 5][:800]},
        ]
    q, a = ITEMS[4]["question"], ITEMS[4]["answer"]
    docs += [{"id": "plant-chinese", "text": zh[0][:800] + q + a + zh[1][:800]},
             {"id": "near-chinese", "text": zh[2][:800] + a[:10] + zh[3][:800]}]
    return docs


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    d = tmp_path_factory.mktemp("decont")
    pq.write_table(pa.Table.from_pylist(planted_docs()), d / "planted.parquet")
    with open(d / "qa.jsonl", "w") as f:
        for it in ITEMS:
            f.write(json.dumps(it, ensure_ascii=False) + "\n")
    run_script("download_data.py", "--input", d / "planted.parquet", "--output", d / "raw")
    return d


def _sha1():
    from datatrove.utils.hashing import HashConfig

    return HashConfig(hash_fc="sha1")


# datatrove 0.10.1's default n-gram hash (xxhash) is given str, which xxhash 4 refuses
# ("Strings must be encoded before hashing"): its indexer and filter fail as shipped; sha1
# is its other hash, and the hash decides only collisions, never which n-grams are compared

def _index():
    return D.build_index([(it["question"], it["answer"]) for it in ITEMS], D.NGRAM)


# --------------------------------------------------------------------------------------
# The algorithm: the readable version and the compiled one agree
# --------------------------------------------------------------------------------------

def test_fast_counts_equal_the_readable_ones():
    docs = planted_docs()
    texts = [d["text"] for d in docs] + ["", "Café CAFÉ café 1,234 x", "中文 的 问题", None]
    index = _index()
    fast = F.matched_ngrams(pa.array(texts, pa.string()), index)
    ref = [D.matched_ngrams(t or "", index) for t in texts]
    assert fast.tolist() == ref
    assert sum(c > 0 for c in ref) >= 17          # the planted documents are found
    for t in texts[:-1]:
        assert F.normalise(t) == D.normalise(t)


def test_normalisation_and_overlap_ngrams_are_datatroves():
    from datatrove.pipeline.decont.n_grams import NGramsDecontConfig, NGramsDecontIndexer
    from datatrove.utils.hashing import create_hash_func
    from datatrove.utils.text import simplify_text
    from datatrove.utils.word_tokenizers import load_word_tokenizer

    tok = load_word_tokenizer("en")
    for t in _sample_texts(False, 20) + ["Ça coûte 1.000,50 €; n'est-ce pas?  Don't!"]:
        assert D.tokens(t) == tuple(tok.word_tokenize(simplify_text(t)))
    # the item's n-grams: datatrove's indexer's own code, on its own object
    ix = object.__new__(NGramsDecontIndexer)
    ix.config, ix.tokenizer = NGramsDecontConfig(n_grams=13, hash_config=_sha1()), tok
    ix.hash_func = create_hash_func(ix.config.hash_config)
    for it in ITEMS[:4]:
        theirs = ix.compute_hashes(it["answer"], it["question"])
        ours = [ix.hash_func(" ".join(g)) for g in D.item_ngrams(it["question"], it["answer"])]
        assert ours == theirs and len(ours) > 12


def test_agreement_with_datatroves_filter(tmp_path):
    """The same documents removed as NGramsDecontFilter at n=13 on the planted corpus; the
    only disagreements allowed are documents with Chinese text, where spaCy's English
    tokenizer makes a clause one word and this suite makes each character one."""
    from datatrove.data import Document
    from datatrove.pipeline.decont.n_grams import (NGramsDecontConfig, NGramsDecontFilter,
                                                   NGramsDecontIndexer)
    from datatrove.utils.hashing import create_hash_func
    from datatrove.utils.word_tokenizers import load_word_tokenizer

    cfg = NGramsDecontConfig(n_grams=13, hash_config=_sha1())
    ix = object.__new__(NGramsDecontIndexer)
    ix.config, ix.tokenizer = cfg, load_word_tokenizer("en")
    ix.hash_func = create_hash_func(cfg.hash_config)
    hashes = sorted({h for it in ITEMS for h in ix.compute_hashes(it["answer"], it["question"])})
    np.array(hashes, dtype=cfg.hash_config.np_descr).tofile(tmp_path / "qa.index.hashes")
    flt = NGramsDecontFilter(str(tmp_path), config=cfg)
    docs = planted_docs()
    theirs = [flt.filter(Document(text=d["text"], id=d["id"])) is not True for d in docs]
    ours = (F.matched_ngrams(pa.array([d["text"] for d in docs]), _index()) > 0).tolist()
    differ = [d for d, a, b in zip(docs, theirs, ours) if a != b]
    assert 1 - len(differ) / len(docs) >= 0.97
    assert all(re.search(r"[\u4e00-\u9fff]", d["text"]) for d in differ), \
        [d["id"] for d in differ]
    assert all(ours[i] for i, d in enumerate(docs) if d["id"].startswith("plant-"))


# --------------------------------------------------------------------------------------
# clean.py's decontaminate rule
# --------------------------------------------------------------------------------------

def _ids(folder) -> set[str]:
    return {x for f in sorted(folder.glob("*.parquet"))
            for x in pq.read_table(f, columns=["id"]).column("id").to_pylist()}


def _removed(raw, out) -> set[str]:
    return _ids(raw) - _ids(out)


def test_every_planted_item_removed_and_common_phrases_kept(planted, tmp_path):
    out = tmp_path / "cleaned"
    cp = run_script("clean.py", "--input", planted / "raw", "--output", out, "--rules",
                    "decontaminate", "--eval-sets", planted / "qa.jsonl", "--workers", "2")
    removed = _removed(planted / "raw", out)
    planted_ids = {d["id"] for d in planted_docs() if d["id"].startswith("plant-")}
    assert removed == planted_ids            # every planted copy, and nothing else
    assert "decontamination: 17 documents share n-grams with 5 evaluation items" in cp.stdout
    rep = json.loads((out / "report" / "decontamination.json").read_text())
    assert rep["sets"]["qa.jsonl"] == {"items": 5, "too_short": 0, "found": 5, "documents": 17}
    ex = rep["examples"][0]
    a, b = ex["context"]["marks"][0]
    assert D.normalise(ex["context"]["text"][a:b]).startswith(D.normalise(ex["ngram"])[:20])
    # the reference engine: the same bytes
    ref = tmp_path / "ref"
    run_script("clean.py", "--input", planted / "raw", "--output", ref, "--rules",
               "decontaminate", "--eval-sets", planted / "qa.jsonl", "--engine", "reference")
    assert data_files(out) == data_files(ref)
    assert (out / "report" / "decontamination.json").read_bytes() == \
        (ref / "report" / "decontamination.json").read_bytes()


def test_threshold_rerun_sweep_and_changed_eval_sets(planted, tmp_path):
    out = tmp_path / "cleaned"
    base = ["--input", planted / "raw", "--output", out, "--rules", "tutorial,decontaminate",
            "--eval-sets", planted / "qa.jsonl"]
    run_script("clean.py", *base)
    cp = run_script("clean.py", *base, "--decont-max-ngrams", "20")
    assert "language ID calls made 0" in cp.stdout and "reused for" in cp.stdout
    res = json.loads((out / "manifest.json").read_text())
    assert res["config"]["decont_max_ngrams"] == 20
    assert res["config"]["eval_sets"]["files"][0]["name"] == "qa.jsonl"
    cp = run_script("clean.py", *base, "--sweep", "decont_max_ngrams=0,20")
    assert re.search(r"decont_max_ngrams 0 -> 20: \d+ documents change fate", cp.stdout)
    assert "removed at 0, kept at 20: plant-" in cp.stdout
    # another n: its own index and signal, judged beside the run's; the output untouched
    before = data_files(out)
    cp = run_script("clean.py", *base, "--sweep", "decont_n=8,13,30")
    rows = dict(re.findall(r"^(8|13|30) .*?(\d+)\s+[\d,]+\s+[\d.]+%$", cp.stdout, re.M))
    assert int(rows["8"]) >= int(rows["13"]) > int(rows["30"]), cp.stdout
    assert "decont_n 13 -> 30" in cp.stdout and "removed at 13, kept at 30" in cp.stdout
    assert data_files(out) == before
    cp = run_script("clean.py", *base, "--decont-max-ngrams", "20")
    assert "language ID calls made 0" in cp.stdout and "reused for 1" in cp.stdout
    # other evaluation sets: only this signal is measured again
    fewer = tmp_path / "fewer.jsonl"
    fewer.write_text(json.dumps(ITEMS[0]) + "\n")
    cp = run_script("clean.py", *base[:-1], fewer, "--verbose")
    assert "language ID calls made 0" in cp.stdout
    idx = json.loads((out / "signals" / "index.json").read_text())
    assert json.dumps(idx).count("decontaminate:") >= 1
    assert {"plant-verbatim-0"} <= _removed(planted / "raw", out)
    assert "plant-verbatim-1" not in _removed(planted / "raw", out)


@pytest.mark.parametrize("name,content,why", [
    ("missing.jsonl", '{"question": "q", "reply": "a"}\n', "no field 'answer'"),
    ("empty.jsonl", "", "no evaluation items in it (empty)"),
    ("bad.jsonl", '{"question": "q", "answer": "a"}\n{oops\n', "bad.jsonl:2: not JSON"),
    ("bad.txt", b"fine line\n\xff\xfe broken\n", "bad.txt:2: not UTF-8 text"),
    ("list.jsonl", '["q", "a"]\n', "a JSON list, not an object"),
])
def test_bad_eval_files_are_one_line_and_lose_nothing(planted, tmp_path, name, content, why):
    out = tmp_path / "cleaned"
    run_script("clean.py", "--input", planted / "raw", "--output", out)
    before = snapshot(out)
    bad = tmp_path / name
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    cp = run_script("clean.py", "--input", planted / "raw", "--output", out, "--rules",
                    "tutorial,decontaminate", "--eval-sets", bad, check=False)
    assert cp.returncode == 2
    assert why in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr
    assert snapshot(out) == before


def test_verify_refuses_a_bad_eval_file_before_any_check(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"}\n')
    (tmp_path / "data").mkdir()
    cp = run_script("verify.py", "--data-dir", tmp_path / "data", "--eval-sets", bad,
                    check=False)
    assert cp.returncode == 2 and "bad.jsonl:1: no field 'answer'" in cp.stderr
    assert not (tmp_path / "data" / "verify_report.md").exists()


def test_flags_refused_without_their_pack_or_sets(planted, tmp_path):
    cp = run_script("clean.py", "--input", planted / "raw", "--output", tmp_path / "o",
                    "--eval-sets", planted / "qa.jsonl", check=False)
    assert cp.returncode == 2 and "add decontaminate to --rules" in cp.stderr
    cp = run_script("clean.py", "--input", planted / "raw", "--output", tmp_path / "o",
                    "--rules", "decontaminate", check=False)
    assert cp.returncode == 2 and "--eval-sets FILE" in cp.stderr


def test_parquet_and_text_eval_sets(planted, tmp_path):
    """A parquet file whose answers are lists, and a text file of one item a line."""
    pq.write_table(pa.table({"prompt": [ITEMS[1]["question"]],
                             "golds": [[ITEMS[1]["answer"], "something else entirely"]]}),
                   tmp_path / "p.parquet")
    (tmp_path / "t.txt").write_text(ITEMS[2]["question"] + " " + ITEMS[2]["answer"] + "\n\n")
    out = tmp_path / "cleaned"
    run_script("clean.py", "--input", planted / "raw", "--output", out, "--rules",
               "decontaminate", "--eval-sets", tmp_path / "p.parquet", tmp_path / "t.txt",
               "--eval-question-field", "prompt", "--eval-answer-field", "golds")
    removed = _removed(planted / "raw", out)
    assert {"plant-verbatim-1", "plant-verbatim-2", "plant-embedded-2"} <= removed
    assert "plant-verbatim-0" not in removed
    rep = json.loads((out / "report" / "decontamination.json").read_text())
    assert rep["sets"]["p.parquet"]["items"] == 2 and rep["sets"]["t.txt"]["items"] == 1


# --------------------------------------------------------------------------------------
# verify.py's item 11, and the report's section
# --------------------------------------------------------------------------------------

def test_verify_finds_items_clean_never_saw_and_across_documents(planted, tmp_path):
    """A pipeline without the rule: item 11 fails, with the planted items; one item is
    split over two documents (its question ends one, its answer starts the next), which
    no rule that reads one document sees; --max-eval-items raises the bar."""
    docs = planted_docs()
    split = [{"id": "split-a", "text": _sample_texts(False)[30][:900] + " " + SHORT["question"]},
             {"id": "split-b", "text": SHORT["answer"] + ". " + _sample_texts(False)[31][:900]}]
    evals = tmp_path / "evals.jsonl"
    evals.write_text("".join(json.dumps(x) + "\n" for x in [*ITEMS, SHORT]))
    index = D.build_index([(x["question"], x["answer"]) for x in [*ITEMS, SHORT]])
    assert [D.matched_ngrams(d["text"], index) for d in split] == [0, 0]  # apart: nothing
    keep = [d for d in docs if not d["id"].startswith("plant-") or d["id"] == "plant-verbatim-0"]
    data = tmp_path / "data"
    (data / "in").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(keep + split), data / "in" / "docs.parquet")
    run_script("download_data.py", "--input", data / "in" / "docs.parquet", "--output", data / "raw")
    run_script("clean.py", "--input", data / "raw", "--output", data / "cleaned", "--rules", "lang")
    for script, inp, out, extra in (("dedup_exact.py", "cleaned", "dedup_exact", []),
                                    ("dedup_minhash.py", "dedup_exact", "dedup", []),
                                    ("train_tokenizer.py", "dedup", "tokenizer",
                                     ["--vocab-size", "2000"])):
        run_script(script, "--input", data / inp, "--output", data / out, *extra)
    run_script("pack_parallel.py", "--input", data / "dedup", "--output", data,
               "--tokenizer", data / "tokenizer" / "tokenizer.json")
    val = (data / "pack_report" / "val_ids.txt").read_text().split()
    assert not {"split-a", "split-b"} & set(val)   # both in train.bin, one after the other
    cp = run_script("verify.py", "--data-dir", data, "--eval-sets", evals, check=False)
    item = cp.stdout[cp.stdout.index("11. no evaluation item"):]
    assert cp.returncode == 1 and "[FAIL] 11." in cp.stdout
    found = int(re.search(r"evals.jsonl: 6 items .*?: (\d+) found in train.bin, (\d+) in val",
                          item).group(1))
    assert found == 2, item          # item 0 (planted) and item 5 (split across documents)
    assert "evals.jsonl item 5" in item and "evals.jsonl item 0" in item
    cp = run_script("verify.py", "--data-dir", data, "--eval-sets", evals,
                    "--max-eval-items", "2", check=False)
    assert "[PASS] 11." in cp.stdout
    cp = run_script("verify.py", "--data-dir", data, check=False)
    assert "11." not in cp.stdout    # no --eval-sets: the ten items of section 6


def test_report_page_marks_the_matches(planted, tmp_path):
    data = tmp_path / "data"
    run_script("download_data.py", "--input", planted / "planted.parquet", "--output", data / "raw")
    run_script("clean.py", "--input", data / "raw", "--output", data / "cleaned", "--rules",
               "tutorial,decontaminate", "--eval-sets", planted / "qa.jsonl")
    run_script("report.py", "--data-dir", data)
    page = (data / "report.html").read_text()
    assert 'id=decontamination' in page and "qa.jsonl" in page
    marks = re.findall(r"<mark>(.*?)</mark>", page, re.S)
    assert marks and any("glassmakers" in m.lower() or "ledger" in m.lower()
                         or "lanterns" in m.lower() or "hygrometer" in m.lower() for m in marks)


def test_bench_quick_smoke():
    """bench/bench_decont.py on part of the sample: both sides timed, the same documents
    removed, every planted copy found, the Chinese n table filled."""
    import sys

    from conftest import ROOT
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_decont

    res = bench_decont.run(pq.read_table(SAMPLE).column("text").to_pylist()[:600], quick=True)
    ours, theirs, agree = res["rows"]
    assert ours["mb_per_s_per_core"] > 0 and theirs["mb_per_s_per_core"] > 0
    assert agree["ratio"] >= 0.99 and res["agreement"]["compared"] > 100
    assert all(a == b for a, b in (v.split("/") for v in res["recall"].values()))
    assert [r["n"] for r in res["chinese_n"]] == list(bench_decont.ZH_NS)
