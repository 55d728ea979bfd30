"""Section 2, further: the numbers behind three published rule sets (FineWeb, Gopher, C4).

Each rule of a published rule set compares one number measured on a document with a
threshold. This module defines those numbers, one short function each, in the order a
learner meets them, grouped by rule set ("pack"):

    fineweb            FineWeb's quality filter (4 rules)
    gopher_quality     Gopher's quality rules (10 rules)
    gopher_repetition  Gopher's repetition rules (14 rules)
    c4                 C4's document-level rules (3 rules; this project never edits text)

RULE_TABLE at the end says, for every rule, which number it reads, the threshold and
direction of datatrove 0.10.1's default, datatrove's own condition, and the languages
the rule is meant for. algorithms/quality_signals_fast.py computes the same numbers for
a whole batch at once; tests/test_quality_signals.py checks both against each other and
the decisions against datatrove's filters.

Words. datatrove counts words with spaCy's blank English tokenizer: text is cut at
whitespace, then punctuation is split off both ends of each piece ("end." -> "end", "."),
some pieces are split inside ("well-known" -> "well", "-", "known"), and 1,347 special
cases are applied ("don't" -> "do", "n't"; "e.g." stays whole). `words()` below is that
tokenizer rewritten in plain Python (its table of special cases and its letter classes
are copied from spaCy into spacy_en_special_cases.json by
scripts/gen_spacy_special_cases.py). Punctuation marks are words too: "Hello, world." is
four words, two of them without a letter -- that is why Gopher's "80% of words contain a
letter" removes more English prose than one would guess.

Chinese. Chinese has no spaces, so spaCy's English tokenizer makes one "word" of a whole
clause. Here every CJK character (a Han ideograph or a kana) is one word, as the tutorial
counts Chinese, and everything else is cut exactly as above; on text without CJK
characters `words()` gives spaCy's English tokens. The other script-aware choices:
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

import bisect
import json
import re
import unicodedata
from collections import Counter
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

# datatrove's character sets (datatrove/utils/text.py) and spaCy's sentence-final marks.
from datatrove.utils.text import PUNCTUATION_SET, TERMINAL_PUNCTUATION  # noqa: E402

SENTENCE_END = set("!.?։؟۔܀܁܂߹।॥၊။።፧፨᙮᜵᜶᠃᠉᥄᥅᪨᪩᪪᪫᭚᭛᭞᭟᰻᰼᱾᱿‼‽⁇⁈⁉⸮⸼꓿꘎꘏꛳꛷꡶꡷꣎꣏꤯꧈꧉꩝꩞꩟꫰꫱꯫﹒﹖﹗！．？"
                   "𐩖𐩗𑁇𑁈𑂾𑂿𑃀𑃁𑅁𑅂𑅃𑇅𑇆𑇍𑇞𑇟𑈸𑈹𑈻𑈼𑊩𑑋𑑌𑗂𑗃𑗉𑗊𑗋𑗌𑗍𑗎𑗏𑗐𑗑𑗒𑗓𑗔𑗕𑗖𑗗𑙁𑙂𑜼𑜽𑜾𑩂𑩃𑪛𑪜𑱁𑱂𑱁𑱂𖩮𖩯𖫵𖬷𖬸𖭄𛲟𝪈｡。")
STOP_CHARS = tuple(sorted(TERMINAL_PUNCTUATION))
STOP_WORDS = {"the", "be", "to", "of", "and", "that", "have", "with",   # datatrove's
              "的", "是", "在", "和", "了", "有", "不", "也"}            # Chinese ones


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


# What each pack's kept signals depend on (cleaning.quality_pack): a version per pack,
# raised when a pack's numbers change. fineweb 3: "……" after Chinese ends a sentence.
PACK_VERSIONS = {"fineweb": 3, "gopher_quality": 2, "gopher_repetition": 2, "c4": 2}


def measure(pack: str, text: str) -> dict[str, float | int]:
    """Every signal of a pack for one text."""
    return {name: f(text) for name, f in SIGNALS[pack].items()}


def _rule(pack, name, signal, condition, threshold, direction, description, bins,
          scale="linear", languages=("en", "zh")):
    return {"pack": pack, "name": name, "signal": signal, "datatrove": condition,
            "threshold": threshold, "direction": direction, "languages": list(languages),
            "description": description, "bins": list(bins), "scale": scale}


_SHARE = [i / 20 for i in range(21)]
_SMALL = [0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0]
_GRAM = [i / 50 for i in range(26)] + [0.6, 0.8, 1.0]
_COUNT = [0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 1e6]

# Every rule: removed when value < threshold ("below") or value > threshold ("above").
RULE_TABLE = [
    # fineweb (datatrove FineWebQualityFilter)
    _rule("fineweb", "fineweb_line_punct", "line_punct_share",
          "ratio < line_punct_thr (lines ending in TERMINAL_PUNCTUATION; here also in '…' "
          "after a CJK character; no non-blank line: 'empty')", 0.12, "below",
          "Too few lines end like a sentence: menus, lists, tables.", _SHARE),
    _rule("fineweb", "fineweb_short_lines", "short_line_share",
          "ratio > short_line_thr (lines of len <= short_line_length=30; here width, a CJK "
          "character 2)", 0.67, "above",
          "Mostly short lines: navigation, link lists, headings.", _SHARE),
    _rule("fineweb", "fineweb_dup_line_chars", "dup_line_char_share",
          "find_duplicates(lines)[1] / len(text.replace('\\n', '')) > char_duplicates_ratio",
          0.01, "above", "Repeated lines carry more than 1% of the characters: boilerplate.",
          _SMALL),
    _rule("fineweb", "fineweb_newline_words", "newlines_per_word",
          "text.count('\\n') / len(words) > new_line_ratio", 0.3, "above",
          "Many newlines per word: a list rather than prose.", _SMALL),
    # gopher_quality (datatrove GopherQualityFilter)
    _rule("gopher_quality", "gopher_min_words", "word_count",
          "n_non_symbol_words < min_doc_words", 50, "below",
          "Fewer than 50 words (punctuation not counted): too short to learn from.",
          _COUNT, "log"),
    _rule("gopher_quality", "gopher_max_words", "word_count",
          "n_non_symbol_words > max_doc_words", 100_000, "above",
          "More than 100,000 words: dumps and concatenations.", _COUNT, "log"),
    _rule("gopher_quality", "gopher_min_mean_word_length", "mean_word_length",
          "mean word length < min_avg_word_length", 3, "below",
          "Words of under 3 characters on average: codes, numbers, gibberish.",
          [i / 2 for i in range(31)], languages=("en",)),
    _rule("gopher_quality", "gopher_max_mean_word_length", "mean_word_length",
          "mean word length > max_avg_word_length", 10, "above",
          "Words of over 10 characters on average: URLs, hashes, glued text.",
          [i / 2 for i in range(31)], languages=("en",)),
    _rule("gopher_quality", "gopher_hash_ratio", "hash_ratio",
          "text.count('#') / n_words > max_symbol_word_ratio", 0.1, "above",
          "More than one '#' per ten words: hashtags, markup, comments.", _SMALL),
    _rule("gopher_quality", "gopher_ellipsis_ratio", "ellipsis_ratio",
          "(text.count('...') + text.count('…')) / n_words > max_symbol_word_ratio", 0.1,
          "above", "More than one ellipsis per ten words: truncated snippets.", _SMALL),
    _rule("gopher_quality", "gopher_bullet_lines", "bullet_line_share",
          "lines starting with '•' or '-' / len(text.splitlines()) > max_bullet_lines_ratio",
          0.9, "above", "Over 90% bullet lines: a list, not prose.", _SHARE),
    _rule("gopher_quality", "gopher_ellipsis_lines", "ellipsis_line_share",
          "lines ending in '...' or '…' / len(lines) > max_ellipsis_lines_ratio", 0.3,
          "above", "Over 30% of lines end in an ellipsis: teasers, truncated feeds.",
          _SHARE),
    _rule("gopher_quality", "gopher_alpha_words", "alpha_word_share",
          "words with an alphabetic character / n_words < max_non_alpha_words_ratio", 0.8,
          "below", "Under 80% of words (punctuation marks included) contain a letter: "
          "numbers, symbols, code.", _SHARE),
    _rule("gopher_quality", "gopher_stop_words", "stop_word_count",
          "len(stop_words & set(words)) < min_stop_words", 2, "below",
          "Fewer than 2 different stop words: not running text.",
          [0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16]),
    # gopher_repetition (datatrove GopherRepetitionFilter)
    _rule("gopher_repetition", "gopher_rep_empty", "chars", "not text ('empty')", 1,
          "below", "An empty text.", _COUNT, "log"),
    _rule("gopher_repetition", "gopher_dup_paragraphs", "dup_paragraph_share",
          "paragraphs_duplicates / len(paragraphs) > dup_para_frac", 0.3, "above",
          "Over 30% of paragraphs repeat an earlier one.", _SHARE),
    _rule("gopher_repetition", "gopher_dup_paragraph_chars", "dup_paragraph_char_share",
          "char_duplicates / len(text) > dup_para_char_frac", 0.2, "above",
          "Repeated paragraphs hold over 20% of the characters.", _SHARE),
    _rule("gopher_repetition", "gopher_dup_lines", "dup_line_share",
          "line_duplicates / len(lines) > dup_line_frac", 0.3, "above",
          "Over 30% of lines repeat an earlier one.", _SHARE),
    _rule("gopher_repetition", "gopher_dup_line_chars", "dup_line_char_share",
          "char_duplicates / len(text) > dup_line_char_frac", 0.2, "above",
          "Repeated lines hold over 20% of the characters.", _SHARE),
    *[_rule("gopher_repetition", f"gopher_top_{n}gram", f"top_{n}gram_char_share",
            f"find_top_duplicate({n}-grams) / len(text) > {t}", t, "above",
            f"The most frequent {n}-word sequence covers over {t:.0%} of the text.", _GRAM)
      for n, t in ((2, 0.20), (3, 0.18), (4, 0.16))],
    *[_rule("gopher_repetition", f"gopher_dup_{n}gram", f"dup_{n}gram_char_share",
            f"find_all_duplicate(words, {n}) / len(text) > {t}", t, "above",
            f"Repeated {n}-word sequences cover over {t:.0%} of the text.", _GRAM)
      for n, t in ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))],
    # c4 (datatrove C4QualityFilter, document-level checks only)
    _rule("c4", "c4_lorem_ipsum", "has_lorem_ipsum", "'lorem ipsum' in line.lower()", 0,
          "above", "Placeholder text.", [0, 0.5, 1]),
    _rule("c4", "c4_curly_bracket", "has_curly_bracket", "'{' in line", 0, "above",
          "A '{': code or templates rather than prose.", [0, 0.5, 1]),
    _rule("c4", "c4_min_sentences", "sentence_count",
          "num_sentences < min_num_sentences (spaCy sentences per line, at least 1 a line)",
          5, "below", "Fewer than 5 sentences.", _COUNT, "log"),
]

PACKS = tuple(SIGNALS)


def removed_by(rule: dict, value: float) -> bool:
    """The rule's decision for a measured value."""
    if rule["direction"] == "below":
        return value < rule["threshold"]
    return value > rule["threshold"]


def decide(pack: str, values: dict, lang: str = "en") -> list[str]:
    """Names of the pack's rules (those meant for lang) that remove a document."""
    return [r["name"] for r in RULE_TABLE if r["pack"] == pack and lang in r["languages"]
            and removed_by(r, values[r["signal"]])]
