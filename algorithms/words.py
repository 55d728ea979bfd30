"""Words as datatrove's quality filters count them: spaCy's English tokenizer, rewritten.

datatrove's FineWeb, Gopher and C4 filters count words with spaCy's blank English
tokenizer (datatrove.utils.word_tokenizers): text is cut at whitespace, then punctuation
is split off both ends of each piece ("end." -> "end", "."), some pieces are split inside
("well-known" -> "well", "-", "known"), and 1,347 special cases are applied ("don't" ->
"do", "n't"; "e.g." stays whole). `words()` below is that tokenizer rewritten in plain
Python, so that the rule packs (algorithms/quality_signals.py) count the same words
without spaCy at run time; its table of special cases and its letter classes are copied
from spaCy into spacy_en_special_cases.json by scripts/gen_spacy_special_cases.py.
Punctuation marks are words too: "Hello, world." is four words, two of them without a
letter -- that is why Gopher's "80% of words contain a letter" removes more English prose
than one would guess.

Chinese has no spaces, so spaCy's English tokenizer makes one "word" of a whole clause.
Here every CJK character (a Han ideograph or a kana) is one word, as the tutorial counts
Chinese, and everything else is cut exactly as above; on text without CJK characters
`words()` gives spaCy's English tokens (tests/test_words.py checks both against datatrove).
algorithms/words_fast.py cuts the same words, compiled.
"""

from __future__ import annotations

import bisect
import json
import re
import unicodedata
from functools import lru_cache
from pathlib import Path


# --------------------------------------------------------------------------------------
# Characters
# --------------------------------------------------------------------------------------

# spaCy's punctuation lists (spacy/lang/char_classes.py), as plain strings.
PUNCT_CHARS = "…,:;!?¿؟¡()[]{}<>_#*&。？！，、；：～·।،۔؛٪"
QUOTE_CHARS = "'\"”“`‘´’‚,„»«「」『』（）〔〕【】《》〈〉\u2329\u232a⟦⟧"
CURRENCY_CHARS = "$£€¥฿₽﷼₴₠₡₢₣₤₥₦₧₨₩₪₫₭₮₯₰₱₲₳₵₶₷₸₹₺₻₼₾₿"
UNITS = ("km km² km³ m m² m³ dm dm² dm³ cm cm² cm³ mm mm² mm³ ha µm nm yd in ft kg g mg µg "
         "t lb oz m/s km/h kmh mph hPa Pa mbar mb MB kb KB gb GB tb TB T G M K % км км² км³ "
         "м м² м³ дм дм² дм³ см см² см³ мм мм² мм³ нм кг г мг м/с км/ч кПа Па мбар Кб КБ кб "
         "Мб МБ мб Гб ГБ гб Тб ТБ тбكم كم² كم³ م م² م³ سم سم² سم³ مم مم² مم³ كم غرام جرام "
         "جم كغ ملغ كوب اكواب").split()
HYPHENS = ("-", "–", "—", "--", "---", "——", "~")
# Characters after which a final "." is split off (spaCy's suffix rule for "."), besides
# digits and lower-case letters.
DOT_AFTER = "%²-+" + PUNCT_CHARS + QUOTE_CHARS + "(?:)|"


@lru_cache(None)
def is_cjk(ch: str) -> bool:
    """A Han ideograph or a kana: one word by itself (Chinese and Japanese have no spaces)."""
    return ch.isalpha() and unicodedata.name(ch, "").startswith(
        ("CJK UNIFIED", "CJK COMPATIBILITY IDEOGRAPH", "HIRAGANA", "KATAKANA"))


def is_icon(ch: str) -> bool:   # spaCy's LIST_ICONS: symbols (So) of an older Unicode
    return spacy_class("icon", ch)


@lru_cache(None)
def spacy_class(name: str, ch: str) -> bool:
    """spaCy's letter classes ("alpha", "alpha_lower", "alpha_upper"), which its affix
    rules use: close to str.isalpha, but not equal; and its icons ("icon"), the symbols
    (category So) of the Unicode version spaCy's list was written for, which leaves out
    621 newer ones Python calls So, many emoji among them (code point ranges, in the
    JSON file)."""
    ranges = spacy_data()[name]
    i = bisect.bisect_right(ranges, [ord(ch), 0x110000]) - 1
    return i >= 0 and ranges[i][0] <= ord(ch) <= ranges[i][1]


def alpha(ch: str) -> bool:      # spaCy's ALPHA
    return spacy_class("alpha", ch)


def lowerish(ch: str) -> bool:   # spaCy's ALPHA_LOWER: lower-case or caseless letters
    return spacy_class("alpha_lower", ch)


def upperish(ch: str) -> bool:   # spaCy's ALPHA_UPPER: upper-case or caseless letters
    return spacy_class("alpha_upper", ch)


def is_digit(ch: str) -> bool:   # spaCy's [0-9]
    return "0" <= ch <= "9"


# --------------------------------------------------------------------------------------
# Words: spaCy's English tokenizer, rewritten
# --------------------------------------------------------------------------------------

@lru_cache(1)
def spacy_data() -> dict:
    path = Path(__file__).with_name("spacy_en_special_cases.json")
    return json.loads(path.read_text(encoding="utf-8"))


def special_cases() -> dict[str, list[str]]:
    return spacy_data()["cases"]


def prefix_len(s: str) -> int:
    """Length of the punctuation spaCy splits off the front of s (0: none)."""
    if s.startswith(".."):
        return len(s) - len(s.lstrip("."))
    if s.startswith(("US$", "C$", "A$")):
        return s.index("$") + 1
    c = s[0]
    if c in "§%=—–" + PUNCT_CHARS + QUOTE_CHARS + CURRENCY_CHARS or is_icon(c):
        return 1
    if c == "+" and not (len(s) > 1 and is_digit(s[1])):
        return 1
    return 0


def suffix_len(s: str) -> int:
    """Length of the punctuation spaCy splits off the end of s (0: none): the longest of
    its suffix rules that matches."""
    n, c = len(s), s[-1]
    best = 0
    if c in PUNCT_CHARS + QUOTE_CHARS + "—–" or is_icon(c):
        best = 1
    if s.endswith(("……", "'s", "'S", "’s", "’S")):
        best = 2
    if s.endswith(".."):
        best = max(best, n - len(s.rstrip(".")))
    if c == "." and n > 1:
        b = s[-2]
        if is_digit(b) or lowerish(b) or b in DOT_AFTER:
            best = max(best, 1)
        if n > 2 and upperish(s[-3]) and upperish(b):
            best = max(best, 1)
        if n > 2 and s[-3] == "°" and b in "FfCcKk":
            best = max(best, 1)
    if any(map(is_digit, s[-7:])):   # endings that count only after a digit
        for end in ["+", "US$", "C$", "A$", *CURRENCY_CHARS, *UNITS]:
            k = len(end)
            if n > k and s.endswith(end) and is_digit(s[-k - 1]):
                best = max(best, k)
    return best


def infixes(s: str) -> list[tuple[int, int]]:
    """Where spaCy splits s inside: (start, end) of each infix, left to right."""
    found, i, n = [], 0, len(s)
    while i < n:
        c = s[i]
        prev = s[i - 1] if i > 0 else ""
        nxt = s[i + 1] if i + 1 < n else ""
        end = 0
        if c == "." and nxt == ".":                                         # ellipsis
            end = i + len(s[i:]) - len(s[i:].lstrip("."))
        elif c == "…" or is_icon(c):
            end = i + 1
        elif is_digit(prev) and c in "+-*^" and (is_digit(nxt) or nxt == "-"):
            end = i + 1
        elif c == "." and prev and (lowerish(prev) or prev in QUOTE_CHARS) and nxt and (
                upperish(nxt) or nxt in QUOTE_CHARS):
            end = i + 1
        elif c == "," and prev and alpha(prev) and nxt and alpha(nxt):
            end = i + 1
        elif prev and (alpha(prev) or is_digit(prev)):
            for h in HYPHENS:
                after = s[i + len(h):i + len(h) + 1]
                if s.startswith(h, i) and after and alpha(after):
                    end = i + len(h)
                    break
            if not end and c in ":<>=/" and nxt and alpha(nxt):
                end = i + 1
        if end:
            found.append((i, end))
            i = end
        else:
            i += 1
    return found


def looks_like_url(s: str) -> bool:
    """spaCy's URL_MATCH, reduced to what it accepts: [scheme://][user@]host[:port][/path]
    with host = labels joined by "." and ending in a lower-case top-level domain."""
    starts = [0]
    m = re.match(r"[\w+\-.]{2,}://", s)
    if m:
        starts.append(m.end())
    for a in list(starts):
        starts += [j + 1 for j in range(a + 1, len(s)) if s[j] == "@"]
    for a in starts:
        host = re.match(r"[A-Za-z0-9\u00a1-\uffff_.\-]*", s[a:]).group()
        rest = s[a + len(host):]
        labels = host.split(".")
        tld = labels.pop()
        if not labels or not 2 <= len(tld) <= 63 or not all(lowerish(c) for c in tld):
            continue
        if not all(re.fullmatch(r"[A-Za-z0-9\u00a1-\uffff]([A-Za-z0-9\u00a1-\uffff_\-]{0,62}"
                                r"[A-Za-z0-9\u00a1-\uffff])?", lab) for lab in labels):
            continue
        if re.fullmatch(r"(:\d{2,5})?([/?#].*)?", rest, re.S):
            return True
    return False


def split_piece(s: str, use_special: bool = True) -> list[str]:
    """spaCy's tokenization of one piece of text without spaces (Tokenizer._tokenize)."""
    special = special_cases() if use_special else {}
    if s in special:
        return list(special[s])
    prefixes, suffixes, last = [], [], -1
    while s and len(s) != last:
        if s in special:
            break
        last = len(s)
        pre = prefix_len(s)
        if pre and s[pre:] in special:
            prefixes.append(s[:pre])
            s = s[pre:]
            break
        suf = suffix_len(s[pre:]) if s[pre:] else 0
        if suf and s[:-suf] in special:
            suffixes.append(s[-suf:])
            s = s[:-suf]
            break
        if pre:
            prefixes.append(s[:pre])
        if suf:
            suffixes.append(s[-suf:])
        s = s[pre:len(s) - suf]
    core = []
    if s in special:
        core = list(special[s])
    elif s and looks_like_url(s):
        core = [s]
    elif s:
        start = 0
        for a, b in infixes(s):
            if a == 0:            # spaCy ignores an infix at the very start
                continue
            if a != start:
                core.append(s[start:a])
            core.append(s[a:b])
            start = b
        if s[start:]:
            core.append(s[start:])
    return prefixes + core + suffixes[::-1]


@lru_cache(1)
def glued_specials() -> dict[tuple[str, ...], list[str]]:
    """Special cases that the splitting above takes apart (":)" -> ":", ")"), keyed by
    those parts; spaCy glues the parts back when they meet with no space between."""
    out = {}
    for s, toks in special_cases().items():
        if prefix_len(s) or suffix_len(s) or infixes(s):
            out[tuple(split_piece(s, use_special=False))] = toks
    return out


def glue_specials(tokens: list[str]) -> list[str]:
    """spaCy's second pass over the tokens of one chunk: longest matches first, then the
    earlier one, none overlapping ("'s." is "'s", "." though "s." is a case too)."""
    glued = glued_specials()
    longest = max(map(len, glued))
    found = [(j - i, i) for i in range(len(tokens))
             for j in range(i + 1, min(len(tokens), i + longest) + 1)
             if tuple(tokens[i:j]) in glued]
    taken, keep = set(), {}
    for length, i in sorted(found, key=lambda f: (-f[0], f[1])):
        if i not in taken and i + length - 1 not in taken:
            keep[i] = length
        taken.update(range(i, i + length))
    out, i = [], 0
    while i < len(tokens):
        if i in keep:
            out += glued[tuple(tokens[i:i + keep[i]])]
            i += keep[i]
        else:
            out.append(tokens[i])
            i += 1
    return out


def pieces(chunk: str) -> list[str]:
    """A whitespace-free chunk cut around CJK characters: each is a piece by itself."""
    out, run = [], ""
    for ch in chunk:
        if is_cjk(ch):
            if run:
                out.append(run)
            out.append(ch)
            run = ""
        else:
            run += ch
    if run:
        out.append(run)
    return out


@lru_cache(1 << 16)
def chunk_words(chunk: str) -> tuple[str, ...]:
    """The words of one whitespace-free chunk (cached: real text repeats its chunks)."""
    tokens = []
    for piece in pieces(chunk):
        tokens += [piece] if len(piece) == 1 and is_cjk(piece) else split_piece(piece)
    return tuple(glue_specials(tokens))


@lru_cache(4)
def words(text: str) -> tuple[str, ...]:
    """The words datatrove's filters count (spaCy's English tokens, punctuation included),
    with every CJK character a word of its own. (Cached: most rules read them.)"""
    return tuple(w for chunk in text.split() for w in chunk_words(chunk))
