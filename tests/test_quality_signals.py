"""algorithms/quality_signals(.py, _fast.py): the FineWeb, Gopher and C4 signals.

- the compiled pass gives exactly the readable functions' numbers (every sample document
  and edge cases);
- on English the decisions are datatrove's (the words themselves: tests/test_words.py);
- no pack removes Chinese prose wholesale.
"""

from __future__ import annotations

import sys
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import ROOT, SAMPLE

sys.path.insert(0, str(ROOT / "scripts"))

from algorithms import quality_signals as Q  # noqa: E402
from algorithms import quality_signals_fast as QF  # noqa: E402
from algorithms import rule_packs  # noqa: E402
from algorithms import rules as rules_module  # noqa: E402
from datatrove_packs import datatrove_verdict, filters  # noqa: E402
from rule_agreement import agreement, disagreement_class, tutorial_keeps  # noqa: E402

EDGE = [
    "", " ", "\n", "\n\n\n", " \t\r\n \u3000", "a", ".", "...", "…", "{", "lorem ipsum",
    "Lorem Ipsum dolor sit amet.", "LOREM\nIPSUM", "İ lorem ipsum",
    "line one.\r\nline two!\r\n\r\nline two!\r\n", "a\rb\x0bc\x0cd\x1ce\x85f\u2028g\u2029h",
    "中文", "只有中文没有空格也没有标点", "你好，世界。你好，世界！\n\n你好，世界。你好，世界！",
    "这是第一句。这是第二句！第三句？……第四句", "Python的os模块(os.path)。e.g.中文",
    "emoji 😀😀 text 👍🏽 and ❤️ hearts.\n😀", "a" * 5000 + " " + "b" * 70000,
    "word " * 3000, ("para one is here.\n\n" * 40), "- item\n- item\n• item\n  - item",
    "Wait...\nReally…\nyes...", "# title #tag ## x", "don't can't won't I'm you're it's",
    "e.g. i.e. Mr. Dr. U.S. etc. a.m. 10am 5km 3.14 $5 US$5 -5 +5 +a 100%",
    "see http://example.com/a/b?x=1#y, www.python.org, user@host.org:8080/x, a.b.c",
    "well-known x--y a/b a:b a<b a=b 1-2 1+2 2^3 a,b end.Next ..start end.. ...x",
    "(8) :) :-) ;) (: ):' '' '\"' «quoted» „x“ [1] {2} <3",
    "trailing spaces   \n   leading\ttabs\t\n", "\u00a0nbsp\u00a0inside\u00a0",
    "ÄÖÜ ä. ö. ü. °C. 5°C. Ph.D. N.Y. A. AB. Ab.", "ΑΒΓ. αβγ. Кирилл. кир.",
    "a" * 31 + "\n" + "b" * 30, "x\n" * 100, "The the the the the the the the.",
    # symbols newer than spaCy's list of icons: ordinary characters to it, not affixes
    "🥲. 🥲🥲 .᙭ 🤌🤍 (🟢) 🧋! ⯿x",
    # overlapping special cases in one chunk: the longest, then the earliest ("'s" before
    # "s."); across chunks spaCy differs (docs/stages/clean.md)
    "'''a", "x'''", "'s.A", "'d.S", "(:)a", ".:):", ":):)",
    # an ellipsis ends a Chinese sentence, not an English line
    "他走了很久……\n天色暗了…\n……\n好…x\n・……\nな…\ngit fsck …\nwait…\n中 …",
]


@lru_cache(1)
def sample():
    t = pq.read_table(SAMPLE, columns=["id", "text", "lang"])
    return t.column("text").to_pylist(), t.column("lang").to_pylist(), t


def close(a, b):
    return abs(float(a) - float(b)) <= 1e-12


def test_fast_equals_readable_on_every_sample_document():
    texts, _, table = sample()
    fast = {pack: QF.measure(pack, table.column("text")) for pack in Q.PACKS}
    for pack in Q.PACKS:
        assert set(fast[pack]) == set(Q.SIGNALS[pack])
    bad = [(pack, i, k, v, fast[pack][k][i]) for i, t in enumerate(texts) for pack in Q.PACKS
           for k, v in Q.measure(pack, t).items() if not close(v, fast[pack][k][i])]
    assert not bad, bad[:5]


@pytest.mark.parametrize("pack", Q.PACKS)
def test_fast_equals_readable_on_edge_cases(pack):
    col = pa.array(EDGE + [None], pa.string())
    fast = QF.measure(pack, col)
    for i, t in enumerate(EDGE + [""]):
        for k, v in Q.measure(pack, t).items():
            assert close(v, fast[k][i]), (pack, t[:80], k, v, fast[k][i])
    one = QF.measure_one(pack, EDGE[-1])
    assert one == pytest.approx(Q.measure(pack, EDGE[-1]), abs=1e-12)
    # a sliced and a chunked column read the right rows
    sliced = QF.measure(pack, col.slice(5, 10))
    chunked = QF.measure(pack, pa.chunked_array([col.slice(0, 5), col.slice(5, 10)]))
    for k in fast:
        assert np.array_equal(sliced[k], fast[k][5:15])
        assert np.array_equal(chunked[k], fast[k][:15])


def test_packs_measured_together_equal_each_alone():
    """measure_packs decodes and cuts each text into words once for all the packs it is
    given; any set of packs gives each pack's numbers exactly as measuring it alone."""
    from algorithms import cleaning

    col = pa.concat_arrays([pa.array(EDGE + [None], pa.string()),
                            sample()[2].column("text").combine_chunks().slice(0, 300)])
    alone = {pack: QF.measure(pack, col) for pack in Q.PACKS}
    for packs in (Q.PACKS, Q.PACKS[::-1], ("gopher_repetition", "c4"), ("fineweb",)):
        together = QF.measure_packs(list(packs), col)
        assert list(together) == list(packs)
        for pack in packs:
            assert together[pack].keys() == alone[pack].keys()
            for k, v in alone[pack].items():
                assert together[pack][k].dtype == v.dtype and np.array_equal(together[pack][k], v)
    # a clean.py batch with every pack's rules: one shared pass, the same numbers
    rules = [r for p in Q.PACKS for r in cleaning.load_rules(p)]
    sig = cleaning.Signals.measure(rules, col)
    for r in rules:
        pack, name = r.signal.split(".", 1)
        assert np.array_equal(sig[r.signal], alone[pack][name].astype(sig[r.signal].dtype))


def test_sentence_ends_are_spacys():
    from spacy.pipeline import Sentencizer
    assert set(Sentencizer.default_punct_chars) == Q.SENTENCE_END


def test_rule_packs_match_datatrove_defaults():
    f = filters()
    rules = [r for pack in Q.PACKS for r in rule_packs.PACKS[pack]]
    names = [r.name for r in rules]
    assert len(names) == len(set(names))
    for pack in Q.PACKS:
        for r in rule_packs.PACKS[pack]:
            prefix, signal = r.signal.split(".", 1)
            assert prefix == pack and signal in Q.SIGNALS[pack]
            assert r.kind is (int if signal in Q.INT_SIGNALS else float)
            assert r.flag == "--" + r.name.replace("_", "-") and r.languages in (None, ("en",))
            assert rules_module.declaration_error(r) is None
    th = {r.name: r.threshold for r in rules}
    fw, gq, gr, c4 = (f[p] for p in Q.PACKS)
    assert (th["fineweb_line_punct"], th["fineweb_short_lines"], th["fineweb_dup_line_chars"],
            th["fineweb_newline_words"]) == (fw.line_punct_thr, fw.short_line_threshold,
                                             fw.char_duplicates_ratio, fw.new_line_ratio)
    assert fw.short_line_length == 30
    assert (th["gopher_min_words"], th["gopher_max_words"], th["gopher_min_mean_word_length"],
            th["gopher_max_mean_word_length"], th["gopher_hash_ratio"],
            th["gopher_ellipsis_ratio"], th["gopher_bullet_lines"], th["gopher_ellipsis_lines"],
            th["gopher_alpha_words"], th["gopher_stop_words"]) == (
        gq.min_doc_words, gq.max_doc_words, gq.min_avg_word_length, gq.max_avg_word_length,
        gq.max_symbol_word_ratio, gq.max_symbol_word_ratio, gq.max_bullet_lines_ratio,
        gq.max_ellipsis_lines_ratio, gq.max_non_alpha_words_ratio, gq.min_stop_words)
    assert (th["gopher_dup_paragraphs"], th["gopher_dup_paragraph_chars"], th["gopher_dup_lines"],
            th["gopher_dup_line_chars"]) == (gr.dup_para_frac, gr.dup_para_char_frac,
                                             gr.dup_line_frac, gr.dup_line_char_frac)
    assert tuple((n, th[f"gopher_top_{n}gram"]) for n in (2, 3, 4)) == gr.top_n_grams
    assert tuple((n, th[f"gopher_dup_{n}gram"]) for n in range(5, 11)) == gr.dup_n_grams
    assert th["c4_min_sentences"] == c4.min_num_sentences


def test_newer_emoji_count_as_spacy_counts_them():
    # 🥲 (Unicode 13) is a symbol to Python but not one of spaCy's icons: "🥲🥲" is one word
    # to datatrove, so this document has 48 words without symbols, under Gopher's 50
    text = ("Students learned about the history and science of their country. " * 4
            + " ".join(["together"] * 6) + " 🥲🥲 🥲🥲")
    assert Q.words(text)[-2:] == ("🥲🥲", "🥲🥲")
    values = QF.measure("gopher_quality", pa.array([text], pa.string()))
    assert rule_packs.decide("gopher_quality", {k: v[0] for k, v in values.items()}) == \
        ["gopher_min_words"]
    assert datatrove_verdict("gopher_quality", text) == (False, "gopher_short_doc")


@pytest.mark.parametrize("pack", Q.PACKS)
def test_decisions_agree_with_datatrove_on_english(pack):
    texts, langs, _ = sample()
    en = [t for t, lang in zip(texts, langs) if lang == "en"]
    values = QF.measure(pack, pa.array(en, pa.string()))
    res = agreement(pack, en, values)
    print(f"{pack}: {res['docs']} English documents, agreement {res['agreement']:.2%}, "
          f"disagreements {dict(res['classes'])}")
    assert res["agreement"] >= 0.99
    assert set(res["classes"]) <= {"tokens differ from spaCy's", "CJK characters"}


def test_an_ellipsis_after_chinese_ends_a_sentence():
    """FineWeb's terminal punctuation, for Chinese: a line ending in "……" (or "…") right
    after a CJK character ends a sentence, as 。 does; an ellipsis after anything else
    (English "wait…", "git fsck …", an ellipsis alone) is left as datatrove judges it."""
    lines = {"他走了很久很久……": 1, "天色渐渐暗了下来…": 1, "ひらがな…": 1, "天色。": 1,
             "wait…": 0, "git fsck …": 0, "……": 0, "中 …": 0, "中……x": 0, "・……": 0}
    for line, want in lines.items():
        assert Q.line_punct_share(line) == want, line
        assert QF.measure("fineweb", pa.array([line]))["line_punct_share"][0] == want, line
    prose = "他走了很久很久……\n天色渐渐暗了下来……\n"
    assert Q.measure("fineweb", prose)["line_punct_share"] == 1.0


def test_disagreement_classes():
    assert disagreement_class("中文 text") == "CJK characters"
    assert disagreement_class("plain text.") == "other"


def test_no_pack_removes_chinese_prose_wholesale():
    texts, langs, _ = sample()
    zh = [t for t, lang in zip(texts, langs) if lang == "zh" and tutorial_keeps(t)]
    assert len(zh) > 1000
    col = pa.array(zh, pa.string())
    for pack in Q.PACKS:
        values = QF.measure(pack, col)
        removed = np.zeros(len(zh), bool)
        for r in rule_packs.PACKS[pack]:
            if not r.skips("zh"):
                removed |= r.removed(values[r.signal.split(".", 1)[1]], r.threshold)
        kept = 1 - removed.mean()
        print(f"{pack}: keeps {kept:.1%} of the {len(zh)} Chinese documents the tutorial keeps")
        assert kept >= 0.85, pack


def test_bench_smoke():
    import bench_quality_signals
    texts, _, _ = sample()
    res = bench_quality_signals.run(texts[:60], quick=True)
    assert all(d["agreement"] == 1.0 for d in res["packs"].values())
    assert len(res["rows"]) == 2 * len(Q.PACKS) + 3
    ref_words, our_words, every = res["rows"][-3:]
    assert "datatrove's word tokenizer" in ref_words["name"] and "; 1 block," in ref_words["name"]
    assert our_words["ratio"] == our_words["mb_per_s_per_core"] / ref_words["mb_per_s_per_core"]
    assert our_words["ratio"] > 1        # about 70x on the benchmark corpus
    # every pack measured costs more than the words alone
    assert every["mb_per_s_per_core"] < our_words["mb_per_s_per_core"]


def test_a_declared_signal_no_kernel_computes_is_an_error(monkeypatch):
    """A signal added to a pack's declaration without its compiled kernel was a column of
    zeros (the readable version gave 6, the compiled 0, and rules read the 0)."""
    texts = pa.array(["Lorem ipsum 1234 dolor.", None, ""], pa.string())
    monkeypatch.setitem(Q.SIGNALS, "c4", {**Q.SIGNALS["c4"], "digit_count": len})
    with pytest.raises(RuntimeError, match=r"c4\.digit_count: declared in"):
        QF.measure("c4", texts)
    monkeypatch.undo()
    assert set(QF.measure("c4", texts)) == set(Q.SIGNALS["c4"])
