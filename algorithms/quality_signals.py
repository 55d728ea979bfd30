"""Section 2, further: the numbers behind three published rule sets (FineWeb, Gopher, C4).

Each rule of a published rule set compares one number measured on a document with a
threshold. This module defines those numbers, one short function each, in the order a
learner meets them, grouped by rule set ("pack"):

    fineweb            FineWeb's quality filter (4 rules)
    gopher_quality     Gopher's quality rules (10 rules)
    gopher_repetition  Gopher's repetition rules (14 rules)
    c4                 C4's document-level rules (3 rules; this project never edits text)

The rules themselves, each declared once as a Rule with datatrove 0.10.1's default and
datatrove's own condition beside it, are algorithms/rule_packs.py.
algorithms/quality_signals_fast.py computes the same numbers for a whole batch at once;
tests/test_quality_signals.py checks both against each other and the decisions against
datatrove's filters.

Words. datatrove counts words with spaCy's blank English tokenizer, punctuation marks
included; `words()` (algorithms/words.py) is that tokenizer rewritten in plain Python,
with every CJK character a word of its own (Chinese has no spaces: spaCy's English
tokenizer makes one "word" of a whole clause). On text without CJK characters it gives
spaCy's English tokens.

Chinese. The script-aware choices of the packs, besides one word per CJK character:
  * terminal punctuation (FineWeb) is datatrove's own Unicode set unchanged: it already
    has 。！？．｡ (the ASCII-only set is C4's, whose line filter this project does not
    use). Not "；" or "：", which, like ";" and ":" that datatrove leaves out, end clauses
    and introduce lists. A line ending in "…" (Chinese writes "……") ends a sentence
    when a CJK character comes before the ellipsis: Chinese narrative ends its sentences
    so, and English lines ending in "…" ("git fsck …") are left as datatrove judges them
    (counting every "…" changed its decision on English documents);
  * short lines (FineWeb) are measured in columns, a CJK character two: 30 characters of
    Chinese are a full sentence, not a menu item (without it the rule removed 70 of the
    sample's 1,415 Chinese documents, with it 3);
  * stop words (Gopher): datatrove's eight English words plus eight Chinese function
    characters (的 是 在 和 了 有 不 也), so one count serves both languages;
  * sentences (C4) are counted as spaCy's sentencizer counts them, whose sentence-final
    marks include 。！？; with one word per CJK character that counts Chinese sentences;
  * mean word length (Gopher) has no Chinese meaning (a character is a word of length
    1), so those two rules are declared for English only.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

from datatrove.utils.text import PUNCTUATION_SET, TERMINAL_PUNCTUATION

from .words import is_cjk, words

# --------------------------------------------------------------------------------------
# Characters, sentences and repeats: what several packs share
# --------------------------------------------------------------------------------------

# datatrove's character sets (datatrove/utils/text.py, imported above) and spaCy's
# sentence-final marks.
SENTENCE_END = set("!.?։؟۔܀܁܂߹।॥၊။።፧፨᙮᜵᜶᠃᠉᥄᥅᪨᪩᪪᪫᭚᭛᭞᭟᰻᰼᱾᱿‼‽⁇⁈⁉⸮⸼꓿꘎꘏꛳꛷꡶꡷꣎꣏꤯꧈꧉꩝꩞꩟꫰꫱꯫﹒﹖﹗！．？"
                   "𐩖𐩗𑁇𑁈𑂾𑂿𑃀𑃁𑅁𑅂𑅃𑇅𑇆𑇍𑇞𑇟𑈸𑈹𑈻𑈼𑊩𑑋𑑌𑗂𑗃𑗉𑗊𑗋𑗌𑗍𑗎𑗏𑗐𑗑𑗒𑗓𑗔𑗕𑗖𑗗𑙁𑙂𑜼𑜽𑜾𑩂𑩃𑪛𑪜𑱁𑱂𑱁𑱂𖩮𖩯𖫵𖬷𖬸𖭄𛲟𝪈｡。")
STOP_CHARS = tuple(sorted(TERMINAL_PUNCTUATION))
STOP_WORDS = {"the", "be", "to", "of", "and", "that", "have", "with",   # datatrove's
              "的", "是", "在", "和", "了", "有", "不", "也"}            # Chinese ones


def sentences(line: str) -> int:
    """Sentences spaCy's sentencizer finds in one stripped line: one more each time a word
    that is not punctuation follows a sentence-final mark. Runs of whitespace other than
    a single space are tokens too (spaCy keeps them), so they can start a sentence."""
    tokens = []
    for m in re.finditer(r"\s+|\S+", line):
        if m.group().isspace():
            if m.group() != " ":
                tokens.append(m.group())
        else:
            tokens += words(m.group())
    count, seen_end = (1 if tokens else 0), False
    for t in tokens:
        if t in SENTENCE_END:
            seen_end = True
        elif seen_end and not all(unicodedata.category(c).startswith("P") for c in t):
            count += 1
            seen_end = False
    return count


def find_duplicates(items: list[str]) -> tuple[int, int]:
    """(items that repeat an earlier one, their characters) -- datatrove's helper."""
    seen, dup, dup_chars = set(), 0, 0
    for x in items:
        if x in seen:
            dup += 1
            dup_chars += len(x)
        else:
            seen.add(x)
    return dup, dup_chars


# --------------------------------------------------------------------------------------
# fineweb: FineWeb's quality filter
# --------------------------------------------------------------------------------------

def nonblank_lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.strip()]


def ends_sentence(line: str) -> bool:
    """A line that ends in terminal punctuation: datatrove's set, or an ellipsis ("…",
    "……") right after a CJK character, as Chinese ends a sentence."""
    if line.endswith(STOP_CHARS):
        return True
    body = line.rstrip("…")
    return body != line and body != "" and is_cjk(body[-1])


def line_punct_share(text: str) -> float:
    """Share of non-blank lines ending in terminal punctuation (0 with no lines)."""
    lines = nonblank_lines(text)
    return sum(map(ends_sentence, lines)) / len(lines) if lines else 0.0


def width(line: str) -> int:
    """Length in columns: a CJK character is two columns wide (as a terminal shows it)."""
    return len(line) + sum(map(is_cjk, line))


def short_line_share(text: str) -> float:
    """Share of non-blank lines at most 30 columns wide (30 characters in English; 15
    Chinese characters, which say about as much as 50 English ones)."""
    lines = nonblank_lines(text)
    return sum(width(line) <= 30 for line in lines) / len(lines) if lines else 0.0


def dup_line_char_share(text: str) -> float:
    """Characters of non-blank lines that repeat an earlier line, over the characters
    of the text without its newlines."""
    lines = nonblank_lines(text)
    return find_duplicates(lines)[1] / len(text.replace("\n", "")) if lines else 0.0


def newlines_per_word(text: str) -> float:
    """Newlines per word: high for lists and menus."""
    n = len(words(text))
    return text.count("\n") / n if n else 0.0


# --------------------------------------------------------------------------------------
# gopher_quality: Gopher's quality rules
# --------------------------------------------------------------------------------------

def real_words(text: str) -> list[str]:
    """Words with at least one character that is not punctuation."""
    return [w for w in words(text) if any(c not in PUNCTUATION_SET for c in w)]


def word_count(text: str) -> int:
    """Words, punctuation marks not counted."""
    return len(real_words(text))


def mean_word_length(text: str) -> float:
    """Mean length of those words, in characters (0 with none)."""
    ws = real_words(text)
    return sum(map(len, ws)) / len(ws) if ws else 0.0


def hash_ratio(text: str) -> float:
    """'#' characters per word (punctuation marks counted as words here)."""
    n = len(words(text))
    return text.count("#") / n if n else 0.0


def ellipsis_ratio(text: str) -> float:
    """Ellipses ("..." or "…") per word."""
    n = len(words(text))
    return (text.count("...") + text.count("…")) / n if n else 0.0


def bullet_line_share(text: str) -> float:
    """Share of lines (str.splitlines) starting with a bullet, "•" or "-"."""
    lines = text.splitlines()
    return sum(s.lstrip().startswith(("•", "-")) for s in lines) / len(lines) if lines else 0.0


def ellipsis_line_share(text: str) -> float:
    """Share of lines ending in an ellipsis."""
    lines = text.splitlines()
    return sum(s.rstrip().endswith(("...", "…")) for s in lines) / len(lines) if lines else 0.0


def alpha_word_share(text: str) -> float:
    """Share of words (punctuation marks included) with an alphabetic character."""
    ws = words(text)
    return sum(any(c.isalpha() for c in w) for w in ws) / len(ws) if ws else 0.0


def stop_word_count(text: str) -> int:
    """How many different stop words occur (English: the, be, to, of, and, that, have,
    with; Chinese: 的 是 在 和 了 有 不 也)."""
    return len(STOP_WORDS.intersection(words(text)))


# --------------------------------------------------------------------------------------
# gopher_repetition: Gopher's repetition rules
# --------------------------------------------------------------------------------------

def chars(text: str) -> int:
    return len(text)


def paragraphs(text: str) -> list[str]:
    return re.split(r"\n{2,}", text.strip())


def raw_lines(text: str) -> list[str]:
    return re.split(r"\n+", text)


def dup_paragraph_share(text: str) -> float:
    """Paragraphs that repeat an earlier one, over all paragraphs."""
    ps = paragraphs(text)
    return find_duplicates(ps)[0] / len(ps)


def dup_paragraph_char_share(text: str) -> float:
    """Characters in repeated paragraphs, over the text's characters."""
    return find_duplicates(paragraphs(text))[1] / len(text) if text else 0.0


def dup_line_share(text: str) -> float:
    """Lines (split on runs of newlines) that repeat an earlier one, over all lines."""
    ls = raw_lines(text)
    return find_duplicates(ls)[0] / len(ls)


def dup_line_char_share_gopher(text: str) -> float:
    """Characters in repeated lines, over the text's characters."""
    return find_duplicates(raw_lines(text))[1] / len(text) if text else 0.0


def top_ngram_char_share(text: str, n: int) -> float:
    """Characters covered by the most frequent word n-gram (its length written with
    spaces, times its count; the first seen wins a tie), over the text's characters."""
    ws = words(text)
    grams = [" ".join(ws[i:i + n]) for i in range(len(ws) - n + 1)]
    if not grams or not text:
        return 0.0
    gram, count = Counter(grams).most_common(1)[0]
    return len(gram) * count / len(text)


def dup_ngram_char_share(text: str, n: int) -> float:
    """Characters in word n-grams that repeat an earlier n-gram, over the text's
    characters. Left to right; after a repeat the scan jumps past it, so no character
    is counted twice (datatrove's find_all_duplicate: n-grams are joined without spaces)."""
    ws = words(text)
    seen, total, i = set(), 0, 0
    while i < len(ws) - n + 1:
        gram = "".join(ws[i:i + n])
        if gram in seen:
            total += len(gram)
            i += n
        else:
            seen.add(gram)
            i += 1
    return total / len(text) if text else 0.0


# --------------------------------------------------------------------------------------
# c4: C4's document-level rules
# --------------------------------------------------------------------------------------

def has_lorem_ipsum(text: str) -> int:
    return int("lorem ipsum" in text.lower())


def has_curly_bracket(text: str) -> int:
    """1 if the text has a "{" (C4 drops code; datatrove looks for the opening one)."""
    return int("{" in text)


def sentence_count(text: str) -> int:
    """Sentences, counted line by line (str.splitlines); a line with none counts as one,
    as datatrove counts it."""
    return sum(max(1, sentences(line.strip())) for line in text.splitlines())


# --------------------------------------------------------------------------------------
# The signals of each pack, and the rules that read them
# --------------------------------------------------------------------------------------

SIGNALS = {
    "fineweb": {
        "line_punct_share": line_punct_share,
        "short_line_share": short_line_share,
        "dup_line_char_share": dup_line_char_share,
        "newlines_per_word": newlines_per_word,
    },
    "gopher_quality": {
        "word_count": word_count,
        "mean_word_length": mean_word_length,
        "hash_ratio": hash_ratio,
        "ellipsis_ratio": ellipsis_ratio,
        "bullet_line_share": bullet_line_share,
        "ellipsis_line_share": ellipsis_line_share,
        "alpha_word_share": alpha_word_share,
        "stop_word_count": stop_word_count,
    },
    "gopher_repetition": {
        "chars": chars,
        "dup_paragraph_share": dup_paragraph_share,
        "dup_paragraph_char_share": dup_paragraph_char_share,
        "dup_line_share": dup_line_share,
        "dup_line_char_share": dup_line_char_share_gopher,
        **{f"top_{n}gram_char_share": (lambda t, n=n: top_ngram_char_share(t, n))
           for n in (2, 3, 4)},
        **{f"dup_{n}gram_char_share": (lambda t, n=n: dup_ngram_char_share(t, n))
           for n in range(5, 11)},
    },
    "c4": {
        "has_lorem_ipsum": has_lorem_ipsum,
        "has_curly_bracket": has_curly_bracket,
        "sentence_count": sentence_count,
    },
}


# What each pack's kept signals depend on (algorithms/rule_packs.py): a version per pack,
# raised when a pack's numbers change. fineweb 3: "……" after Chinese ends a sentence.
PACK_VERSIONS = {"fineweb": 3, "gopher_quality": 2, "gopher_repetition": 2, "c4": 2}
# The signals that are counts (kept as int64); the others are shares, lengths and ratios.
INT_SIGNALS = {"word_count", "stop_word_count", "sentence_count", "chars", "has_lorem_ipsum",
               "has_curly_bracket"}


def measure(pack: str, text: str) -> dict[str, float | int]:
    """Every signal of a pack for one text."""
    return {name: f(text) for name, f in SIGNALS[pack].items()}


PACKS = tuple(SIGNALS)
