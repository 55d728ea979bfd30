"""The published rule sets (tutorial section 2.2 names them: C4, Gopher, FineWeb), each rule
declared as a Rule (algorithms/rules.py), with datatrove 0.10.1's defaults:

    fineweb            FineWeb's quality filter (4 rules)
    gopher_quality     Gopher's quality rules (10 rules)
    gopher_repetition  Gopher's repetition rules (14 rules)
    c4                 C4's document-level rules (3 rules; this project never edits text)
    decontaminate      an evaluation item's n-grams in the document (1 rule, measured
                       against the index of --eval-sets: algorithms/decontamination.py)

Each rule reads one number of algorithms/quality_signals.py (one short function each,
the readable definition, which the reference engine runs) through its pack's Pass, which
measures the whole pack in one compiled scan (algorithms/quality_signals_fast.py) in the
fast engine. Above each rule, datatrove's own condition, and what differs for Chinese. A
rule meant for every language applies to any document; one declared for some languages
only (Gopher's mean word length: English) needs the document's language, from language ID.
"""

from __future__ import annotations

import functools

from . import quality_signals
from .rules import Pass, Rule


def _pack_scan(pack: str) -> Pass:
    """A pack's numbers: one compiled scan for the batch (the packs a batch needs run as one
    call, sharing the words), or quality_signals.measure for one document."""
    def fast(texts):
        from . import quality_signals_fast   # numba: imported only when measuring
        return quality_signals_fast.measure(pack, texts)

    return Pass(fast, version=f"{pack}:{quality_signals.PACK_VERSIONS[pack]}",
                shared=(_measure_packs, pack),
                reference=functools.partial(quality_signals.measure, pack))


def _measure_packs(packs, texts):
    """Several packs' numbers in one compiled call (their words cut once)."""
    from . import quality_signals_fast   # numba: imported only when measuring

    return quality_signals_fast.measure_packs(packs, texts)


_FINEWEB, _GOPHER_Q, _GOPHER_R, _C4 = (_pack_scan(p) for p in quality_signals.PACKS)

# histogram edges
SHARE = tuple(i / 20 for i in range(21))
SMALL = (0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
GRAM = tuple([i / 50 for i in range(26)] + [0.6, 0.8, 1.0])
COUNT = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 1e6)
WORD_LENGTH = tuple(i / 2 for i in range(31))
STOP_WORDS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16)
FLAG = (0, 0.5, 1)

# A rule removes a document whose number is below ("below") or above ("above") its
# threshold; a threshold's range is its `valid` (shares 0 to 1, counts and ratios >= 0).

FINEWEB = (   # datatrove FineWebQualityFilter
    # datatrove: ratio < line_punct_thr (lines ending in TERMINAL_PUNCTUATION; here also
    #   in '…' after a CJK character; no non-blank line: 'empty')
    Rule("fineweb_line_punct", "Too few lines end like a sentence: menus, lists, tables.",
         "fineweb.line_punct_share", _FINEWEB["line_punct_share"], 0.12, "below",
         "--fineweb-line-punct", float, bins=SHARE, valid=(0, 1)),
    # datatrove: ratio > short_line_thr (lines of len <= short_line_length=30; here width,
    #   a CJK character 2)
    Rule("fineweb_short_lines", "Mostly short lines: navigation, link lists, headings.",
         "fineweb.short_line_share", _FINEWEB["short_line_share"], 0.67, "above",
         "--fineweb-short-lines", float, bins=SHARE, valid=(0, 1)),
    # datatrove: find_duplicates(lines)[1] / len(text.replace('\n', '')) >
    #   char_duplicates_ratio
    Rule("fineweb_dup_line_chars",
         "Repeated lines carry more than 1% of the characters: boilerplate.",
         "fineweb.dup_line_char_share", _FINEWEB["dup_line_char_share"], 0.01, "above",
         "--fineweb-dup-line-chars", float, bins=SMALL, valid=(0, 1)),
    # datatrove: text.count('\n') / len(words) > new_line_ratio
    Rule("fineweb_newline_words", "Many newlines per word: a list rather than prose.",
         "fineweb.newlines_per_word", _FINEWEB["newlines_per_word"], 0.3, "above",
         "--fineweb-newline-words", float, bins=SMALL, valid=(0, None)),
)

GOPHER_QUALITY = (   # datatrove GopherQualityFilter
    # datatrove: n_non_symbol_words < min_doc_words
    Rule("gopher_min_words",
         "Fewer than 50 words (punctuation not counted): too short to learn from.",
         "gopher_quality.word_count", _GOPHER_Q["word_count"], 50, "below",
         "--gopher-min-words", int, bins=COUNT, scale="log", valid=(0, None)),
    # datatrove: n_non_symbol_words > max_doc_words
    Rule("gopher_max_words", "More than 100,000 words: dumps and concatenations.",
         "gopher_quality.word_count", _GOPHER_Q["word_count"], 100_000, "above",
         "--gopher-max-words", int, bins=COUNT, scale="log", valid=(0, None)),
    # datatrove: mean word length < min_avg_word_length
    Rule("gopher_min_mean_word_length",
         "Words of under 3 characters on average: codes, numbers, gibberish.",
         "gopher_quality.mean_word_length", _GOPHER_Q["mean_word_length"], 3.0, "below",
         "--gopher-min-mean-word-length", float, bins=WORD_LENGTH,
         languages=("en",), valid=(0, None)),
    # datatrove: mean word length > max_avg_word_length
    Rule("gopher_max_mean_word_length",
         "Words of over 10 characters on average: URLs, hashes, glued text.",
         "gopher_quality.mean_word_length", _GOPHER_Q["mean_word_length"], 10.0, "above",
         "--gopher-max-mean-word-length", float, bins=WORD_LENGTH,
         languages=("en",), valid=(0, None)),
    # datatrove: text.count('#') / n_words > max_symbol_word_ratio
    Rule("gopher_hash_ratio", "More than one '#' per ten words: hashtags, markup, comments.",
         "gopher_quality.hash_ratio", _GOPHER_Q["hash_ratio"], 0.1, "above",
         "--gopher-hash-ratio", float, bins=SMALL, valid=(0, None)),
    # datatrove: (text.count('...') + text.count('…')) / n_words > max_symbol_word_ratio
    Rule("gopher_ellipsis_ratio", "More than one ellipsis per ten words: truncated snippets.",
         "gopher_quality.ellipsis_ratio", _GOPHER_Q["ellipsis_ratio"], 0.1, "above",
         "--gopher-ellipsis-ratio", float, bins=SMALL, valid=(0, None)),
    # datatrove: lines starting with '•' or '-' / len(text.splitlines()) >
    #   max_bullet_lines_ratio
    Rule("gopher_bullet_lines", "Over 90% bullet lines: a list, not prose.",
         "gopher_quality.bullet_line_share", _GOPHER_Q["bullet_line_share"], 0.9, "above",
         "--gopher-bullet-lines", float, bins=SHARE, valid=(0, 1)),
    # datatrove: lines ending in '...' or '…' / len(lines) > max_ellipsis_lines_ratio
    Rule("gopher_ellipsis_lines", "Over 30% of lines end in an ellipsis: teasers, truncated feeds.",
         "gopher_quality.ellipsis_line_share", _GOPHER_Q["ellipsis_line_share"], 0.3, "above",
         "--gopher-ellipsis-lines", float, bins=SHARE, valid=(0, 1)),
    # datatrove: words with an alphabetic character / n_words < max_non_alpha_words_ratio
    Rule("gopher_alpha_words",
         "Under 80% of words (punctuation marks included) contain a letter: numbers, symbols, "
         "code.",
         "gopher_quality.alpha_word_share", _GOPHER_Q["alpha_word_share"], 0.8, "below",
         "--gopher-alpha-words", float, bins=SHARE, valid=(0, 1)),
    # datatrove: len(stop_words & set(words)) < min_stop_words
    Rule("gopher_stop_words", "Fewer than 2 different stop words: not running text.",
         "gopher_quality.stop_word_count", _GOPHER_Q["stop_word_count"], 2, "below",
         "--gopher-stop-words", int, bins=STOP_WORDS, valid=(0, None)),
)

GOPHER_REPETITION = (   # datatrove GopherRepetitionFilter
    # datatrove: not text ('empty')
    Rule("gopher_rep_empty", "An empty text.",
         "gopher_repetition.chars", _GOPHER_R["chars"], 1, "below",
         "--gopher-rep-empty", int, bins=COUNT, scale="log", valid=(0, None)),
    # datatrove: paragraphs_duplicates / len(paragraphs) > dup_para_frac
    Rule("gopher_dup_paragraphs", "Over 30% of paragraphs repeat an earlier one.",
         "gopher_repetition.dup_paragraph_share", _GOPHER_R["dup_paragraph_share"], 0.3, "above",
         "--gopher-dup-paragraphs", float, bins=SHARE, valid=(0, 1)),
    # datatrove: char_duplicates / len(text) > dup_para_char_frac
    Rule("gopher_dup_paragraph_chars", "Repeated paragraphs hold over 20% of the characters.",
         "gopher_repetition.dup_paragraph_char_share",
         _GOPHER_R["dup_paragraph_char_share"], 0.2, "above",
         "--gopher-dup-paragraph-chars", float, bins=SHARE, valid=(0, 1)),
    # datatrove: line_duplicates / len(lines) > dup_line_frac
    Rule("gopher_dup_lines", "Over 30% of lines repeat an earlier one.",
         "gopher_repetition.dup_line_share", _GOPHER_R["dup_line_share"], 0.3, "above",
         "--gopher-dup-lines", float, bins=SHARE, valid=(0, 1)),
    # datatrove: char_duplicates / len(text) > dup_line_char_frac
    Rule("gopher_dup_line_chars", "Repeated lines hold over 20% of the characters.",
         "gopher_repetition.dup_line_char_share", _GOPHER_R["dup_line_char_share"], 0.2, "above",
         "--gopher-dup-line-chars", float, bins=SHARE, valid=(0, 1)),
    # datatrove: find_top_duplicate(2-grams) / len(text) > 0.2
    Rule("gopher_top_2gram", "The most frequent 2-word sequence covers over 20% of the text.",
         "gopher_repetition.top_2gram_char_share", _GOPHER_R["top_2gram_char_share"], 0.2, "above",
         "--gopher-top-2gram", float, bins=GRAM, valid=(0, 1)),
    # datatrove: find_top_duplicate(3-grams) / len(text) > 0.18
    Rule("gopher_top_3gram", "The most frequent 3-word sequence covers over 18% of the text.",
         "gopher_repetition.top_3gram_char_share", _GOPHER_R["top_3gram_char_share"], 0.18, "above",
         "--gopher-top-3gram", float, bins=GRAM, valid=(0, 1)),
    # datatrove: find_top_duplicate(4-grams) / len(text) > 0.16
    Rule("gopher_top_4gram", "The most frequent 4-word sequence covers over 16% of the text.",
         "gopher_repetition.top_4gram_char_share", _GOPHER_R["top_4gram_char_share"], 0.16, "above",
         "--gopher-top-4gram", float, bins=GRAM, valid=(0, 1)),
    # datatrove: find_all_duplicate(words, 5) / len(text) > 0.15
    Rule("gopher_dup_5gram", "Repeated 5-word sequences cover over 15% of the text.",
         "gopher_repetition.dup_5gram_char_share", _GOPHER_R["dup_5gram_char_share"], 0.15, "above",
         "--gopher-dup-5gram", float, bins=GRAM, valid=(0, 1)),
    # datatrove: find_all_duplicate(words, 6) / len(text) > 0.14
    Rule("gopher_dup_6gram", "Repeated 6-word sequences cover over 14% of the text.",
         "gopher_repetition.dup_6gram_char_share", _GOPHER_R["dup_6gram_char_share"], 0.14, "above",
         "--gopher-dup-6gram", float, bins=GRAM, valid=(0, 1)),
    # datatrove: find_all_duplicate(words, 7) / len(text) > 0.13
    Rule("gopher_dup_7gram", "Repeated 7-word sequences cover over 13% of the text.",
         "gopher_repetition.dup_7gram_char_share", _GOPHER_R["dup_7gram_char_share"], 0.13, "above",
         "--gopher-dup-7gram", float, bins=GRAM, valid=(0, 1)),
    # datatrove: find_all_duplicate(words, 8) / len(text) > 0.12
    Rule("gopher_dup_8gram", "Repeated 8-word sequences cover over 12% of the text.",
         "gopher_repetition.dup_8gram_char_share", _GOPHER_R["dup_8gram_char_share"], 0.12, "above",
         "--gopher-dup-8gram", float, bins=GRAM, valid=(0, 1)),
    # datatrove: find_all_duplicate(words, 9) / len(text) > 0.11
    Rule("gopher_dup_9gram", "Repeated 9-word sequences cover over 11% of the text.",
         "gopher_repetition.dup_9gram_char_share", _GOPHER_R["dup_9gram_char_share"], 0.11, "above",
         "--gopher-dup-9gram", float, bins=GRAM, valid=(0, 1)),
    # datatrove: find_all_duplicate(words, 10) / len(text) > 0.1
    Rule("gopher_dup_10gram", "Repeated 10-word sequences cover over 10% of the text.",
         "gopher_repetition.dup_10gram_char_share", _GOPHER_R["dup_10gram_char_share"], 0.1,
         "above",
         "--gopher-dup-10gram", float, bins=GRAM, valid=(0, 1)),
)

C4 = (   # datatrove C4QualityFilter, its document-level checks only
    # datatrove: 'lorem ipsum' in line.lower()
    Rule("c4_lorem_ipsum", "Placeholder text.",
         "c4.has_lorem_ipsum", _C4["has_lorem_ipsum"], 0, "above",
         "--c4-lorem-ipsum", int, bins=FLAG, valid=(0, None)),
    # datatrove: '{' in line
    Rule("c4_curly_bracket", "A '{': code or templates rather than prose.",
         "c4.has_curly_bracket", _C4["has_curly_bracket"], 0, "above",
         "--c4-curly-bracket", int, bins=FLAG, valid=(0, None)),
    # datatrove: num_sentences < min_num_sentences (spaCy sentences per line, at least 1 a
    #   line)
    Rule("c4_min_sentences", "Fewer than 5 sentences.",
         "c4.sentence_count", _C4["sentence_count"], 5, "below",
         "--c4-min-sentences", int, bins=COUNT, scale="log", valid=(0, None)),
)

PACKS = {"fineweb": FINEWEB, "gopher_quality": GOPHER_QUALITY,
         "gopher_repetition": GOPHER_REPETITION, "c4": C4}


# The decontaminate pack: one rule, whose signal is measured against the n-gram index of
# the user's evaluation sets (algorithms/decontamination.py), kept in a folder that
# clean.py names when it binds the pack (pipeline/eval_sets.py).

def _decont_batch(folder: str | None, texts) -> dict:
    from . import decontamination_fast   # numba: imported only when measuring
    index, bits = decontamination_fast.loaded(_bound(folder))
    return {"matched_ngrams": decontamination_fast.matched_ngrams(texts, index, bits)}


def _decont_one(folder: str | None, text: str) -> dict:
    from . import decontamination
    index = _index(_bound(folder))
    return {"matched_ngrams": decontamination.matched_ngrams(text, index)}


@functools.lru_cache(maxsize=4)
def _index(folder: str):
    """The index alone, read once per process (the reference engine needs no bitmap)."""
    from pathlib import Path

    from .decontamination import load_index
    return load_index(Path(folder) / "index.npz")


def _bound(folder: str | None) -> str:
    if folder is None:
        raise ValueError("the decontaminate rule needs its evaluation sets (--eval-sets)")
    return folder


MATCHED = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 1e4, 1e5)


def decontaminate(folder: str | None = None, key: str = "",
                  signal: str = "decontaminate.matched_ngrams") -> tuple[Rule, ...]:
    """The decontaminate pack bound to the index kept in `folder` (the signal's version
    names the index's key, so other evaluation sets re-measure this signal alone); None:
    declared only (its flag), not measurable. signal: another name for the signal of
    another n, judged beside the run's own in a sweep (--sweep decont_n=...)."""
    from .decontamination import VERSION

    scan = Pass(functools.partial(_decont_batch, folder),
                version=f"decontaminate:{VERSION}:{key}",
                reference=functools.partial(_decont_one, folder))
    # GPT-3 and datatrove: one n-gram of an evaluation item removes the document
    return (Rule("decontaminate", "Shares an n-gram with an evaluation item: benchmark text "
                 "in training data.", signal, scan["matched_ngrams"],
                 0, "above", "--decont-max-ngrams", int, bins=MATCHED, scale="log",
                 valid=(0, None), shows="> {t} n-grams of an evaluation item"),)


def decide(pack: str, values: dict, lang: str = "en") -> list[str]:
    """Names of the pack's rules that remove a document of language `lang` whose numbers
    (one pack's, as quality_signals.measure gives them) are `values`, at the defaults."""
    return [r.name for r in PACKS[pack] if not r.skips(lang)
            and r.removed(values[r.signal.split(".", 1)[1]], r.threshold)]
