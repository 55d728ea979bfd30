"""train_tokenizer.py: the sample, the checks before saving, the output, determinism."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest


from algorithms import tokenizer_checks, tokenizer_file, tokenizer_sample
import train_tokenizer as tt

import pyarrow.compute as pc
import pyarrow.parquet as pq
from conftest import SAMPLE, run_script, snapshot
from pipeline import sample_files, tokenizer_report
from pipeline.shards import list_shards
from algorithms.tokenizer_file import EOS_TOKEN, SPECIAL_TOKENS, load_tokenizer, ordinary_tokenizer

VOCAB = 2000  # small: the tests train twice on the few-MB sample


@pytest.fixture(scope="module")
def trained(sample_layout, tmp_path_factory) -> Path:
    """The sample's raw shards -> a tokenizer folder, trained with 2 threads."""
    out = tmp_path_factory.mktemp("tok2") / "tokenizer"
    run_script("train_tokenizer.py", "--input", sample_layout / "raw", "--output", out,
               "--vocab-size", VOCAB, "--workers", "2")
    return out


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))


# ---- the output ------------------------------------------------------------------------

def test_output_layout_and_manifest(trained):
    assert sorted(p.name for p in trained.iterdir()) == [
        "manifest.json", "report", "tokenizer.json", "tokenizer_config.json"]
    assert (trained / "report" / "train_tokenizer_stats.md").exists()
    m = manifest(trained)
    assert [f["name"] for f in m["files"]] == ["tokenizer.json", "tokenizer_config.json",
                                               "report/heldout.parquet"]
    assert m["counts"]["vocab_size"] == VOCAB and m["counts"]["max_id"] == VOCAB - 1
    s = m["sample"]
    # the whole sample minus the held-out part (min-bytes 1 GB > the corpus)
    assert s["sample_docs"] + s["heldout_docs"] <= m["counts"]["docs_in"]
    assert s["sample_bytes"] + s["heldout_bytes"] == m["counts"]["bytes_in"]
    assert 0 < s["heldout_bytes"] <= 0.1 * m["counts"]["bytes_in"] + 10_000
    # the sample's English/Chinese mix is recorded (the bundled sample has both)
    assert s["zh_docs"] > 100 and s["en_docs"] > 100
    assert abs(s["han_share"] + s["ascii_share"] - 1) < 1e-3


def test_compression_keys_verify_reads(trained):
    comp = manifest(trained)["compression"]
    for lang in ("en", "zh"):
        c = comp[lang]
        assert c["docs"] > 10
        assert c["chars_per_token"] == pytest.approx(c["chars"] / c["tokens"], abs=1e-3)
        assert c["bytes_per_token"] == pytest.approx(c["bytes"] / c["tokens"], abs=1e-3)
    # a Chinese character is 3 bytes: Chinese packs fewer characters but more bytes per token
    assert comp["zh"]["chars_per_token"] < comp["en"]["chars_per_token"]
    assert comp["zh"]["bytes_per_token"] > comp["en"]["bytes_per_token"]


def test_heldout_documents_are_not_in_the_training_sample(sample_layout, tmp_path):
    from algorithms.ids import id_hashes
    from pipeline.units import plan_units, read_unit

    units = [u.to_dict() for u in plan_units(list_shards(sample_layout / "raw"), task_mb=0.5)]
    assert len(units) > 1
    for rank in range(len(units)):
        tt.sample_unit(rank, len(units), units, str(tmp_path), 0.05, 0.25, 0, 100_000)
    results = [json.loads((tmp_path / "_results" / "sample" / f"{r:05d}.json").read_text())
               for r in range(len(units))]
    total = sum(r["bytes_in"] for r in results)
    # every part of the corpus gives its share of bytes: the sample is spread evenly
    assert sum(r["sample_bytes"] for r in results) == pytest.approx(0.25 * total, rel=0.15)
    assert sum(r["heldout_bytes"] for r in results) == pytest.approx(0.05 * total, rel=0.3)
    # the rows chosen for each set are disjoint, decided by the id hash alone
    cuts = tokenizer_sample.share_cuts(0.05, 0.25)
    held, train = set(), set()
    for u in units:
        for b in read_unit(u, columns=["id", "text"]):
            lengths = pc.binary_length(b.column(1)).to_numpy(zero_copy_only=False)
            ids = b.column(0).to_pylist()
            h, t = tokenizer_sample.choose_rows(id_hashes(ids, 0), lengths, cuts)
            held |= {ids[i] for i in h}
            train |= {ids[i] for i in t}
    assert len(held) > 10 and len(train) > 100 and not held & train


def test_sample_does_not_depend_on_how_the_input_is_cut(sample_layout, tmp_path):
    from pipeline.units import plan_units

    texts = []
    for task_mb, d in ((0.3, tmp_path / "small"), (100, tmp_path / "big")):
        units = [u.to_dict() for u in plan_units(list_shards(sample_layout / "raw"), task_mb)]
        for rank in range(len(units)):
            tt.sample_unit(rank, len(units), units, str(d), 0.05, 0.3, 3, 100_000)
        texts.append([t for b in sample_files.iter_sample(d, len(units)) for t in b])
    assert texts[0] == texts[1] and len(texts[0]) > 100


def test_sample_text_written_only_as_far_as_asked(sample_layout, tmp_path):
    """train_rows (the compiled trainer's runs): the first training rows are written, the
    same ones as in a full sample, and every row is still counted."""
    from pipeline.units import plan_units

    units = [u.to_dict() for u in plan_units(list_shards(sample_layout / "raw"), 100)]
    got = {}
    for rows, d in ((None, tmp_path / "all"), (7, tmp_path / "head")):
        tt.sample_unit(0, len(units), units, str(d), 0.05, 0.3, 3, 100_000,
                                     count_words=True, train_rows=rows)
        res = json.loads((d / "_results" / "sample" / "00000.json").read_text())
        got[rows] = ([t for b in sample_files.iter_sample(d, 1) for t in b],
                     {k: v for k, v in res.items() if k != "word_count_cpu_s"},
                     sample_files.read_words(d, 1))
    (all_texts, all_res, all_words), (head, head_res, head_words) = got[None], got[7]
    assert len(all_texts) > 100 and head == all_texts[:7]
    assert head_res == all_res and head_res["sample_docs"] == len(all_texts)
    assert all(np.array_equal(a, b) for a, b in zip(all_words, head_words))


def test_tokenizer_checks_on_the_saved_file(trained):
    tok = load_tokenizer(trained / "tokenizer.json")
    assert tok.get_vocab_size() == VOCAB
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(11))
    plain = ordinary_tokenizer(tok)
    for name, text in tokenizer_checks.ROUND_TRIP_CASES.items():
        ids = plain.encode(text, add_special_tokens=False).ids
        assert plain.decode(ids, skip_special_tokens=False) == text, name
    # 4.4: a character never seen in training still round-trips (all 256 bytes are in)
    rare = "𓀀 ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"
    assert plain.decode(plain.encode(rare).ids) == rare


def test_literal_endoftext_is_plain_text_unless_asked(trained):
    tok = load_tokenizer(trained / "tokenizer.json")
    text = f"a page that says {EOS_TOKEN} in its text"
    # HF tokenizers matches special tokens in raw text by default: the trap
    assert 0 in tok.encode(text, add_special_tokens=False).ids
    # document text goes through ordinary_tokenizer: no special id, same text back
    ids = ordinary_tokenizer(tok).encode(text, add_special_tokens=False).ids
    assert not set(ids) & set(range(len(SPECIAL_TOKENS)))
    assert tok.decode(ids) == text
    # asked for explicitly, it is the single special id
    assert tok.encode(EOS_TOKEN).ids == [0]


def test_loads_in_transformers_with_eos(trained):
    transformers = pytest.importorskip("transformers")
    t = transformers.PreTrainedTokenizerFast.from_pretrained(str(trained))
    assert t.eos_token == EOS_TOKEN and t.eos_token_id == 0
    assert len(t) == VOCAB
    text = "Hello , world .  机器学习 😀\n\n  x"
    assert t.decode(t(text)["input_ids"]) == text  # clean_up_tokenization_spaces is off


def test_bpetrainer_gives_the_same_tokenizer(trained, sample_layout, tmp_path):
    """--engine reference (the tutorial's corpus_iter and BpeTrainer) writes the fast
    engine's files byte for byte; the manifest records which engine ran, and its config
    is the same (an output of one engine is current for the other)."""
    out = tmp_path / "tokenizer"
    run_script("train_tokenizer.py", "--input", sample_layout / "raw", "--output", out,
               "--vocab-size", VOCAB, "--workers", "2", "--engine", "reference")
    for name in ("tokenizer.json", "tokenizer_config.json", "report/heldout.parquet"):
        assert (out / name).read_bytes() == (trained / name).read_bytes(), name
    assert manifest(out)["engine"] == "reference" and manifest(trained)["engine"] == "fast"
    assert manifest(out)["config"] == manifest(trained)["config"]


def test_same_bytes_for_any_workers(trained, sample_layout, tmp_path):
    out = tmp_path / "tokenizer"
    run_script("train_tokenizer.py", "--input", sample_layout / "raw", "--output", out,
               "--vocab-size", VOCAB, "--workers", "1")
    for name in ("tokenizer.json", "tokenizer_config.json", "report/heldout.parquet"):
        assert (out / name).read_bytes() == (trained / name).read_bytes(), name
    assert manifest(out)["compression"] == manifest(trained)["compression"]


def test_unchanged_rerun_keeps_the_tokenizer_and_force_retrains(trained, sample_layout,
                                                                 tmp_path):
    out = tmp_path / "tokenizer"
    shutil.copytree(trained, out)
    args = ("train_tokenizer.py", "--input", sample_layout / "raw", "--output", out,
            "--vocab-size", VOCAB)
    before = snapshot(out)
    cp = run_script(*args)
    assert "is up to date" in cp.stdout and "training sample" not in cp.stdout
    assert snapshot(out) == before   # not one file rewritten
    assert manifest(out)["config"]["tokenizers"]               # the library's version counts
    # --compare-hf is another run (it adds BpeTrainer's difference): it trains both, on
    # the whole sample, and measures no difference
    cp = run_script(*args, "--compare-hf")
    assert "up to date" not in cp.stdout and "training sample" in cp.stdout
    m = manifest(out)
    assert m["config"]["compare_hf"] is True and "compare_hf" not in manifest(trained)["config"]
    assert m["bpetrainer"]["differ"] == 0 and m["bpetrainer"]["how"].startswith("measured")
    assert (out / "tokenizer.json").read_bytes() == (trained / "tokenizer.json").read_bytes()
    # a tokenizer.json changed in place, same size: never trusted, trained again
    good = (out / "tokenizer.json").read_bytes()
    (out / "tokenizer.json").write_bytes(good.replace(b'"merges"', b'"merges"'.upper()))
    cp = run_script(*args)
    assert "up to date" not in cp.stdout and "training sample" in cp.stdout
    assert (out / "tokenizer.json").read_bytes() == good
    # the held-out text compare_tokenizers.py and verify.py read is part of the output
    held = (out / "report" / "heldout.parquet").read_bytes()
    (out / "report" / "heldout.parquet").unlink()
    cp = run_script(*args)
    assert "up to date" not in cp.stdout and "training sample" in cp.stdout
    assert (out / "report" / "heldout.parquet").read_bytes() == held
    # a tokenizer made by older code (its config has an older output_version, or none) is
    # not current: the code may write other files for the same input and flags
    mpath = out / "manifest.json"
    m = json.loads(mpath.read_text())
    assert m["config"]["output_version"] >= 2
    del m["config"]["output_version"]
    mpath.write_text(json.dumps(m))
    cp = run_script(*args)
    assert "up to date" not in cp.stdout and "training sample" in cp.stdout
    assert (out / "report" / "heldout.parquet").read_bytes() == held
    assert (out / "tokenizer.json").read_bytes() == good
    # --force trains even an output that is up to date, to the same bytes
    cp = run_script(*args, "--force")
    assert "up to date" not in cp.stdout and "training sample" in cp.stdout
    assert (out / "tokenizer.json").read_bytes() == good


# ---- failing loudly --------------------------------------------------------------------

def test_too_small_corpus_says_how_far_it_got(sample_layout, tmp_path):
    out = tmp_path / "tokenizer"
    out.mkdir()   # an earlier output of the stage (its manifest names it)
    (out / "keep.txt").write_text("previous output")
    (out / "manifest.json").write_text(json.dumps({"stage": "train_tokenizer"}))
    cp = run_script("train_tokenizer.py", "--input", sample_layout / "raw", "--output", out,
                    "--max-bytes", "30000", "--workers", "1", check=False)   # (--min-bytes:
    assert cp.returncode == 2, cp.stderr                    # its default yields to it)
    err = cp.stderr.strip().splitlines()[-1]
    assert err.startswith("error: the vocabulary reached only ") and "of --vocab-size 32,000" in err
    assert "lower --vocab-size" in err and "Traceback" not in cp.stderr
    assert (out / "keep.txt").read_text() == "previous output"  # untouched


@pytest.mark.parametrize("args, words", [
    (["--vocab-size", "70000"], "uint16"),
    (["--vocab-size", "65537"], "and 65536, so every id fits in uint16"),   # 4.6: ids 0-65535
    (["--vocab-size", "200"], "special tokens"),
    (["--vocab-size", "0"], "must be between 268 (the 256 bytes, 11 special tokens"),
    (["--max-bytes", "3000000000"], "issue 2058"),
    (["--sample-ratio", "0"], "--sample-ratio"),
    (["--min-bytes", "10", "--max-bytes", "5"], "--min-bytes"),
    (["--memory-budget", "lots"], "--memory-budget"),
    (["--seed", "-1"], "--seed -1: must be between 0 and 2**64-1"),
    (["--heldout-bytes", "-5"], "--heldout-bytes -5: must not be negative"),
    (["--max-doc-chars", "0"], "--max-doc-chars 0: must be positive"),
    # 2**64 and above were a traceback after sampling (numba's typing, BpeTrainer's u64)
    (["--min-frequency", str(2**64)], f"--min-frequency {2**64}: must be at most 2**63-1"),
])
def test_bad_flags_give_one_line_errors(sample_layout, tmp_path, args, words):
    cp = run_script("train_tokenizer.py", "--input", sample_layout / "raw",
                    "--output", tmp_path / "t", *args, check=False)
    assert cp.returncode == 2
    assert cp.stderr.startswith("error: ") and words in cp.stderr and "Traceback" not in cp.stderr


def test_a_sample_too_large_for_memory_stops_before_training(trained, sample_layout, tmp_path):
    """A --memory-budget below the trainer's expected peak: one line naming the --max-bytes
    that fits, nothing trained, the previous output untouched. With that --max-bytes the
    stage trains, expecting no more than the budget. (The default trainer's estimate.)"""
    from algorithms.trainer_memory import FAST_BASE, fast_trainer_memory

    s = manifest(trained)["sample"]
    need = fast_trainer_memory(s["distinct_words"], s["distinct_word_bytes"], s["sample_bytes"])
    assert s["han_chars"] > 100_000                         # the sample is half Chinese
    assert s["trainer_memory_expected_mb"] == round(need / 2**20, 1)
    # the estimate holds on this sample: the peak while training is not above it
    assert 0 < s["trainer_memory_peak_mb"] <= 1.1 * s["trainer_memory_expected_mb"]
    budget = (FAST_BASE + need) // 2
    out = tmp_path / "tokenizer"
    out.mkdir()   # an earlier output of the stage (its manifest names it)
    (out / "keep.txt").write_text("previous output")
    (out / "manifest.json").write_text(json.dumps({"stage": "train_tokenizer"}))
    args = ("train_tokenizer.py", "--input", sample_layout / "raw", "--vocab-size", VOCAB,
            "--memory-budget", budget)
    cp = run_script(*args, "--output", out, check=False)
    assert cp.returncode == 2, cp.stderr
    err = [x for x in cp.stderr.strip().splitlines() if x.startswith("error: ")]
    assert len(err) == 1 and "Traceback" not in cp.stderr     # one line, besides progress
    assert err[0].startswith("error: training on this sample") and "needs about" in err[0]
    m = re.search(r"lower --max-bytes to ([0-9,]+) \(and --min-bytes to at most that\)", err[0])
    assert m, err[0]
    assert "trainer memory: about" in cp.stdout and "training time" not in cp.stdout
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt", "manifest.json"]  # as it was
    fit = int(m.group(1).replace(",", ""))
    assert 0 < fit < s["sample_bytes"]
    out2 = tmp_path / "fits"
    run_script(*args, "--output", out2, "--max-bytes", fit, "--min-bytes", 0)
    got = manifest(out2)["sample"]
    assert got["sample_bytes"] <= fit
    assert got["trainer_memory_expected_mb"] * 2**20 <= budget


def test_bytes_that_fit():
    from algorithms import trainer_memory as tm

    base = tm.TRAINER_BASE
    # half the variable part fits: about half the sample, 5% lower, two digits
    assert tm.bytes_that_fit(base + 2_000_000_000, base + 1_000_000_000, 123_456_789) == 58_000_000
    assert tm.bytes_that_fit(base + 10**9, base, 10**8) == 0          # not even the base
    assert tm.bytes_that_fit(base + 10**9, base - 1, 10**8) == 0
    fits = [tm.bytes_that_fit(base + 10**9, base + b, 10**8) for b in (10**7, 10**8, 5 * 10**8)]
    assert fits == sorted(fits) and fits[0] > 0
    # the estimate itself: linear in the bytes of the distinct words
    assert tm.trainer_memory(3 * 10**6) - base == tm.TRAINER_PER_BYTE * 3 * 10**6


def test_distinct_words_are_the_pretokenizers(sample_layout, tmp_path):
    """The words the memory estimate counts are the ByteLevel pre-tokenizer's: counted
    whole (0 bits), the distinct pieces and their bytes equal HF's exactly, on the
    sample and on tricky text; sampled one in 64 (the stage's rate), within 10%."""
    import pyarrow.parquet as pq
    from tokenizers import pre_tokenizers

    from algorithms.arrays import strings, text_buffers
    from algorithms.packing_fast import sampled_pieces

    texts = pq.read_table(list_shards(sample_layout / "raw")[0], columns=["text"]) \
        .column("text").to_pylist()
    texts += ["it's   they'll  x\t\n\n y", "机器学习，模型 训练！ 123 4.5e6 😀😀 a", "", " "]
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False)
    exact = {w for t in texts for w, _ in pre.pre_tokenize_str(t)}
    col = strings(texts)
    h, n = sampled_pieces(*text_buffers(col), 0)
    assert len(h) == len(exact)
    assert int(n.sum()) == sum(len(w) for w in exact)   # ByteLevel: a character a byte
    h6, n6 = sampled_pieces(*text_buffers(col), tokenizer_sample.PIECE_SAMPLE_BITS)
    assert set(h6) <= set(h)                        # a sample of the same words
    assert abs((len(h6) << tokenizer_sample.PIECE_SAMPLE_BITS) / len(exact) - 1) < 0.1
    # the tasks' samples unite: words seen by two tasks count once
    staging = tmp_path / "st"
    (staging / sample_files.SAMPLE_DIR).mkdir(parents=True)
    half = len(texts) // 2
    for r, part in enumerate((texts[:half + 50], texts[half - 50:])):
        np.save(staging / sample_files.SAMPLE_DIR / f"pieces-{r:05d}.npy",
                np.stack(tokenizer_sample.unite_pieces(
                    [sampled_pieces(*text_buffers(strings(part)), tokenizer_sample.PIECE_SAMPLE_BITS)])))
    words, nbytes = sample_files.distinct_words(staging, 2)
    assert words == len(h6) << tokenizer_sample.PIECE_SAMPLE_BITS
    assert nbytes == int(n6.sum()) << tokenizer_sample.PIECE_SAMPLE_BITS


def test_missing_input(tmp_path):
    cp = run_script("train_tokenizer.py", "--input", tmp_path / "nope", "--output", tmp_path / "t",
                    check=False)
    assert cp.returncode == 2 and "does not exist" in cp.stderr


def test_each_check_catches_its_failure():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = ["hello world, the quick brown fox", "机器学习模型训练", "low lower newest widest"] * 50

    def small(specials, decoder=True):
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        if decoder:
            tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(texts, trainers.BpeTrainer(
            vocab_size=300, special_tokens=specials, show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        return tok

    good = small(SPECIAL_TOKENS)
    assert tokenizer_checks.check_vocab(good, good.get_vocab_size(), 1000)["max_id"] == good.get_vocab_size() - 1
    with pytest.raises(ValueError, match="reached only"):
        tokenizer_checks.check_vocab(good, 32000, 1000)
    with pytest.raises(ValueError, match="wrong ids"):
        tokenizer_checks.check_special_ids(small(SPECIAL_TOKENS[::-1]))
    with pytest.raises(ValueError, match="round trip failed on chinese"):
        tokenizer_checks.check_round_trip(ordinary_tokenizer(small(SPECIAL_TOKENS, decoder=False)),
                            {"chinese": "机器学习"})
    with pytest.raises(ValueError, match="forge a boundary"):
        tokenizer_checks.check_literal_specials(good, good)  # the full tokenizer matches the literal
    assert tokenizer_checks.check_literal_specials(good, ordinary_tokenizer(good))["explicit_eos_ids"] == [0]


# ---- the sample plan -------------------------------------------------------------------

def test_plan_sample_bounds():
    GB = 10**9
    # 5% of 100 GB = 5 GB, capped at 2 GB
    assert tokenizer_sample.plan_sample(100 * GB, 0.05, GB, 2 * GB, 5 * 10**6) == (5 * 10**6, 2 * GB)
    # 5% of 30 GB = 1.5 GB, inside the bounds
    assert tokenizer_sample.plan_sample(30 * GB, 0.05, GB, 2 * GB, 5 * 10**6)[1] == 1.5 * GB
    # 5% of 4 GB = 200 MB, raised to 1 GB
    assert tokenizer_sample.plan_sample(4 * GB, 0.05, GB, 2 * GB, 5 * 10**6)[1] == GB
    # a corpus smaller than min-bytes: all of it except the held-out part (at most 10%)
    assert tokenizer_sample.plan_sample(4 * 10**6, 0.05, GB, 2 * GB, 5 * 10**6) == (400_000, 3_600_000)


def test_choose_rows_is_seeded_disjoint_and_by_share():
    from algorithms.ids import id_hashes

    ids = [f"doc-{i}" for i in range(10_000)]
    lengths = np.full(len(ids), 100, dtype=np.int64)
    lengths[::10] = 0  # empty documents are never chosen
    cuts = tokenizer_sample.share_cuts(0.05, 0.2)
    h, t = tokenizer_sample.choose_rows(id_hashes(ids, 0), lengths, cuts)
    assert not set(h.tolist()) & set(t.tolist())
    assert 0.9 * 0.05 * 9000 < len(h) < 1.1 * 0.05 * 9000
    assert 0.9 * 0.2 * 9000 < len(t) < 1.1 * 0.2 * 9000
    assert (lengths[h] > 0).all() and (lengths[t] > 0).all()
    h2, t2 = tokenizer_sample.choose_rows(id_hashes(ids, 0), lengths, cuts)
    assert (h == h2).all() and (t == t2).all()
    h3, _ = tokenizer_sample.choose_rows(id_hashes(ids, 1), lengths, cuts)  # another seed: another draw
    assert set(h3.tolist()) != set(h.tolist())
    # shares that cover everything take every non-empty row once
    h, t = tokenizer_sample.choose_rows(id_hashes(ids, 0), lengths, tokenizer_sample.share_cuts(0.1, 0.95))
    assert len(h) + len(t) == 9000
    assert tokenizer_sample.choose_rows(np.zeros(0, np.uint64), np.zeros(0, np.int64), cuts)[1].size == 0


def test_language_mix_counts():
    texts = pa.array(["机器学习 model", "hello world", "2024-01-01", "中文中文中文 abc"])
    han, lat = tokenizer_sample.script_counts(texts)
    assert han.tolist() == [4, 0, 0, 6] and lat.tolist() == [5, 10, 0, 3]
    assert tokenizer_sample.doc_languages(han, lat).tolist() == ["", "en", "", "zh"]
    # mostly one script, or mixed (Chinese prose with as many ASCII letters: neither)
    got = tokenizer_sample.doc_languages(np.array([338, 61, 60, 1, 0]), np.array([344, 40, 40, 9, 1]))
    assert got.tolist() == ["", "zh", "", "", "en"]
    # nulls, empty texts (also last), slices and chunks: counted per document all the same
    texts = pa.array(["ab", None, "", "中c", ""])
    assert [x.tolist() for x in tokenizer_sample.script_counts(texts)] == [[0, 0, 0, 1, 0], [2, 0, 0, 1, 0]]
    assert [x.tolist() for x in tokenizer_sample.script_counts(texts.slice(3))] == [[1, 0], [1, 0]]
    chunked = pa.chunked_array([texts.slice(0, 2), texts.slice(2)])
    assert [x.tolist() for x in tokenizer_sample.script_counts(chunked)] == [[0, 0, 0, 1, 0], [2, 0, 0, 1, 0]]
    # the sample tasks' compiled count agrees, on these and on the bundled sample
    from algorithms import tokenizer_sample_fast
    sample = pq.read_table(SAMPLE, columns=["text"]).column("text")
    for t in (sample, sample.slice(100, 50), texts, texts.slice(3), chunked):
        want = tokenizer_sample.script_counts(t)
        got = tokenizer_sample_fast.script_counts(t)
        assert [x.tolist() for x in got] == [x.tolist() for x in want]
        if t is sample:   # the sample has Chinese and English
            assert want[0].sum() > 10_000 and want[1].sum() > 10_000


def test_compression_is_a_ratio_of_totals():
    c = tokenizer_checks.compression(lambda ts: [len(t) for t in ts], ["ab", "中"])
    assert c["chars_per_token"] == 1.0 and c["bytes_per_token"] == pytest.approx(5 / 3, abs=1e-4)
    assert tokenizer_checks.compression(len, [])["docs"] == 0


def test_token_counts_in_pieces_are_the_whole_texts(trained):
    """verify.py counts long documents in pieces (HF holds ~150 bytes per token of a
    call): cut where the split pattern cuts, the counts are those of the whole texts."""
    plain = ordinary_tokenizer(load_tokenizer(trained / "tokenizer.json"))
    texts = pq.read_table(SAMPLE, columns=["text"]).column("text").to_pylist()
    texts = [t for t in texts if t][:400] + ["\n".join(texts[:300])]   # and one long text
    whole = [len(e.ids) for e in plain.encode_batch_fast(texts, add_special_tokens=False)]
    assert tokenizer_checks.token_counts(plain, texts) == whole
    # small pieces and batches: many cuts, in English (spaces) and Chinese (after 。，)
    size, cut_zh, exact = 300, 0, 0
    for t, n in zip(texts, whole):
        ps = tokenizer_file.pieces(t, size)
        assert "".join(ps) == t and all(0 < len(p) <= size for p in ps)
        if all(len(p) < size for p in ps[:-1]):   # no stretch was cut at `size`
            assert sum(tokenizer_checks.token_counts(plain, ps, size, 1000)) == n
            exact += len(ps) > 1
            cut_zh += any(p[-1] in "。，！？；：、）" for p in ps[:-1])
    assert exact > 100 and cut_zh > 10
    assert tokenizer_checks.token_counts(plain, []) == []


def test_bench_smoke():
    """bench/bench_tokenizer.py runs and returns its rows (shape, not speed)."""
    import bench_tokenizer
    import pyarrow.parquet as pq

    from conftest import SAMPLE

    texts = pq.read_table(SAMPLE, columns=["text"]).column("text").to_pylist()[:150]
    res = bench_tokenizer.run(texts, quick=True)
    assert [r["name"].split(" ")[0] for r in res["rows"]] == [
        "tutorial", "train_tokenizer.py", "BpeTrainer", "sampling", "sampling"]
    for r in res["rows"]:
        assert set(r) >= {"name", "mb_per_s_per_core", "ratio", "target", "ok"}
        assert r["mb_per_s_per_core"] > 0
    assert isinstance(res["rows"][1]["ok"], bool) and res["rows"][1]["ratio"] > 0


LONG = ["短" * 50, "long " * 400, "机器学习" * 300]
CROPPED = ["短" * 50, ("long " * 400)[:100], ("机器学习" * 300)[:100]]   # characters, not bytes


def _sample_long_documents(tmp_path, heldout_share: float, train_share: float, split: str):
    """sample_unit on three documents, two of them over --max-doc-chars 100: the texts
    it wrote for `split` (train / heldout) and its task result."""
    import pyarrow.parquet as pq
    from pipeline.units import plan_units

    shard = tmp_path / "part-00000.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "text": LONG}), shard)
    units = [u.to_dict() for u in plan_units([shard])]
    tt.sample_unit(0, 1, units, str(tmp_path), heldout_share, train_share, 0, 100)
    got = pq.read_table(tmp_path / sample_files.SAMPLE_DIR / f"{split}-00000.parquet")
    res = json.loads((tmp_path / "_results" / "sample" / "00000.json").read_text())
    return got.column("text").to_pylist(), res


def test_long_documents_are_cropped(tmp_path):
    got, res = _sample_long_documents(tmp_path, 0.0, 1.0, "train")
    assert got == CROPPED
    assert res["cropped_docs"] == 2 and res["sample_docs"] == 3
    assert res["sample_bytes"] == sum(len(t.encode()) for t in got)
    assert res["zh_docs"] == 2 and res["en_docs"] == 1 and res["null_docs"] == 0


def test_null_texts_are_counted_and_never_sampled(tmp_path):
    import pyarrow.parquet as pq
    from pipeline.units import plan_units

    shard = tmp_path / "part-00000.parquet"
    texts = ["first text", None, "third text", None, "fifth"]
    pq.write_table(pa.table({"id": list("abcde"), "text": texts}), shard)
    units = [u.to_dict() for u in plan_units([shard])]
    tt.sample_unit(0, 1, units, str(tmp_path), 0.0, 1.0, 0, 100)
    got = pq.read_table(tmp_path / sample_files.SAMPLE_DIR / "train-00000.parquet")
    assert got.column("text").to_pylist() == ["first text", "third text", "fifth"]
    res = json.loads((tmp_path / "_results" / "sample" / "00000.json").read_text())
    assert (res["docs_in"], res["null_docs"], res["sample_docs"]) == (5, 2, 3)
    rows = dict(tokenizer_report.stats_rows({**res, "distinct_words": 0, "distinct_word_bytes": 0},
                              {"vocab_size": 1, "max_id": 0, "round_trip_texts": 0}, {}))
    assert rows["documents without text (null), never sampled"] == 2


def test_bench_memory_smoke(tmp_path):
    """bench/bench_tokenizer_memory.py runs the stage on each language and compares its
    estimate with the peak it reached (shape, on the bundled sample; the estimate is
    checked not to fall short of the peak)."""
    import bench_tokenizer_memory as bm

    from conftest import SAMPLE

    out = tmp_path / "rows.json"
    rc = bm.main(["--corpus", str(SAMPLE.parent), "--zh-mb", "0.5", "--en-mb", "0.5",
                  "--vocab-size", "1000", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert [(r["text"], r["trainer"]) for r in rows] == [
        (f"benchmark corpus, {lang}", trainer) for lang in ("Chinese", "English")
        for trainer in ("fast", "hf")]
    for r in rows:
        assert 0.4 < r["sample_mb"] < 0.7 and r["words"] > 1000 and r["peak_mb"] > 0
        assert r["ok"] == (r["peak_mb"] <= bm.TARGET[r["trainer"]] * r["expected_mb"])
    assert rows[0]["han_chars"] > 10 * rows[2]["han_chars"]      # told apart by script
    assert rc == 0


def test_bench_memory_reads_tagged_text(tmp_path):
    f = tmp_path / "tagged.txt"
    f.write_text("迈向/v  充满/v  希望/n  的/u  新/a  世纪/n\n\n我正在写这本书的心得。\n", encoding="utf-8")
    import bench_tokenizer_memory as bm

    assert bm.read_lines([str(f)]) == ["迈向充满希望的新世纪", "我正在写这本书的心得。"]


def test_a_run_with_another_task_size_does_not_resume_the_old_tasks(tmp_path):
    """Finished tasks kept by a stopped run are resumed only by a run that cuts the input
    the same way: rank 3 of another --task-mb is another piece of the input (resuming it
    counted documents twice: a 'training sample' of 160% of the corpus)."""
    raw = tmp_path / "raw"
    run_script("download_data.py", "--dataset", "sample", "--shard-rows", "100000",
               "--output", raw)
    out = tmp_path / "tok"
    cp = run_script("train_tokenizer.py", "--input", raw, "--output", out, "--vocab-size",
                    "2000", "--memory-budget", "1MB", check=False)   # stops after sampling
    assert cp.returncode == 2 and (tmp_path / ".tok.partial").is_dir()
    cp = run_script("train_tokenizer.py", "--input", raw, "--output", out, "--vocab-size",
                    "2000", "--task-mb", "1")
    assert "resuming" not in cp.stderr
    run_script("train_tokenizer.py", "--input", raw, "--output", tmp_path / "fresh",
               "--vocab-size", "2000", "--task-mb", "1")
    assert (out / "tokenizer.json").read_bytes() == (tmp_path / "fresh" / "tokenizer.json").read_bytes()
    assert manifest(out)["counts"]["docs_in"] == manifest(tmp_path / "fresh")["counts"]["docs_in"] == 2041
    # a small sample in small units: the round trip still reads up to 200 real documents,
    # here every one (it took one batch of the first unit's sample: 85 of 170)
    small = ["--vocab-size", "2000", "--min-bytes", "300000", "--max-bytes", "600000",
             "--sample-ratio", "0.05", "--heldout-bytes", "100000", "--task-mb", "0.05"]
    run_script("train_tokenizer.py", "--input", raw, "--output", tmp_path / "small", *small)
    m = manifest(tmp_path / "small")
    real = tokenizer_checks.REAL_DOCS_CHECKED
    want = min(real, min(m["sample"]["heldout_docs"], real // 2) + m["sample"]["sample_docs"])
    assert m["verification"]["round_trip_real_docs"] == want and want > 150
    # the same cut resumes: stopped again, then rerun with the flags it had
    cp = run_script("train_tokenizer.py", "--input", raw, "--output", tmp_path / "t2",
                    "--vocab-size", "2000", "--memory-budget", "1MB", check=False)
    cp = run_script("train_tokenizer.py", "--input", raw, "--output", tmp_path / "t2",
                    "--vocab-size", "2000")
    assert "resuming" in cp.stderr


def test_heldout_documents_are_cropped_too(tmp_path):
    # the checks and the compression encode each held-out document whole: an 80 MB one
    # took 15 GB; held out, a document is cropped to --max-doc-chars like the sample's
    got, res = _sample_long_documents(tmp_path, 1.0, 0.0, "heldout")
    assert got == CROPPED
    assert (res["heldout_docs"], res["heldout_cropped_docs"], res["sample_docs"]) == (3, 2, 0)
    assert res["heldout_bytes"] == sum(len(t.encode()) for t in got)


def test_a_corpus_wholly_held_out_says_what_to_change(tmp_path):
    from algorithms.ids import id_hashes

    # a one-document corpus whose id falls in the held-out share (10% of the hash range)
    seed = next(s for s in range(1000) if id_hashes(["only"], s)[0] < np.uint64(2**64 // 20))
    (tmp_path / "one.jsonl").write_text(json.dumps({"id": "only", "text": "one small "
                                                    "document " * 50}) + "\n")
    src = tmp_path / "raw"
    run_script("download_data.py", "--input", tmp_path / "one.jsonl", "--output", src,
               "--workers", "1")
    r = run_script("train_tokenizer.py", "--input", src, "--output", tmp_path / "tok",
                   "--vocab-size", "300", "--seed", str(seed), "--workers", "1", check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    err = r.stderr.strip().splitlines()[-1]
    assert "all 1 non-empty document(s) fell in the held-out share" in err, err
    assert "--heldout-bytes 0" in err
    ok = run_script("train_tokenizer.py", "--input", src, "--output", tmp_path / "tok",
                    "--vocab-size", "280", "--seed", str(seed), "--workers", "1",
                    "--heldout-bytes", "0")
    assert ok.returncode == 0, ok.stderr


def test_a_vocabulary_that_cannot_grow_names_what_would_help(tmp_path):
    """A sample with no pair seen --min-frequency times makes no merge: no --vocab-size
    can be reached (the flag's least, 268, needs one merge), so the error says so instead
    of 'lower --vocab-size (at most 267)', which the flag refuses. A --min-frequency
    raised by hand is named when it is what stops the vocabulary; the size the error
    offers is one a rerun reaches."""
    def corpus(name, text):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({"id": "d0", "text": text}) + "\n")
        run_script("download_data.py", "--input", tmp_path / f"{name}.jsonl",
                   "--output", tmp_path / name, "--workers", "1")
        return tmp_path / name

    def last_error(*args):
        cp = run_script("train_tokenizer.py", *args, "--workers", "1", check=False)
        assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
        return cp.stderr.strip().splitlines()[-1]

    one = corpus("one", "hello world")   # every pair seen once
    err = last_error("--input", one, "--output", tmp_path / "t1", "--vocab-size", "268")
    assert "not one merge was made and no --vocab-size can be reached" in err, err
    assert "lower --vocab-size" not in err and "--min-frequency" in err
    rep = corpus("rep", "one small document " * 50 + "tail")   # most pairs 50 times
    err = last_error("--input", rep, "--output", tmp_path / "t2", "--vocab-size", "268",
                     "--min-frequency", "51")
    assert "not one merge" in err and "lower --min-frequency 51" in err, err
    err = last_error("--input", rep, "--output", tmp_path / "t3", "--vocab-size", "300",
                     "--min-frequency", "40")
    m = re.search(r"at most ([\d,]+) here", err)
    assert m and "lower --min-frequency 40" in err, err
    ok = run_script("train_tokenizer.py", "--input", rep, "--output", tmp_path / "t3",
                    "--vocab-size", m.group(1).replace(",", ""), "--min-frequency", "40",
                    "--workers", "1")
    assert ok.returncode == 0


def test_a_sample_share_that_draws_nothing_says_which_flags(tmp_path):
    """--max-bytes far below one document: the sample's hash share draws no document. The
    error said only 'no documents to train on'; it names the share and the flags."""
    (tmp_path / "docs.jsonl").write_text("".join(
        json.dumps({"id": f"d{i}", "text": f"document number {i} " * 20}) + "\n"
        for i in range(100)))
    src = tmp_path / "raw"
    run_script("download_data.py", "--input", tmp_path / "docs.jsonl", "--output", src,
               "--workers", "1")
    cp = run_script("train_tokenizer.py", "--input", src, "--output", tmp_path / "tok",
                    "--max-bytes", "1", "--workers", "1", check=False)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
    err = cp.stderr.strip().splitlines()[-1]
    assert "no documents to train on: the sample's share of 1 of the corpus's" in err, err
    assert "--max-bytes 1)" in err and "raise --max-bytes or --min-bytes" in err
