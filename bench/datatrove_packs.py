"""datatrove's own filters for the four packs of algorithms/quality_signals.py, set up as
the published rule sets (datatrove 0.10.1's defaults), for agreement checks and benchmarks.

C4 is set to its document-level checks only (this project never edits text): lorem
ipsum, a curly bracket, fewer than 5 sentences; every line filter (terminal punctuation,
words per line, word length, javascript, policy, citations) off.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(1)
def filters() -> dict:
    from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter,
                                            GopherQualityFilter, GopherRepetitionFilter)
    return {
        "fineweb": FineWebQualityFilter(),
        "gopher_quality": GopherQualityFilter(),
        "gopher_repetition": GopherRepetitionFilter(),
        "c4": C4QualityFilter(split_paragraph=True, remove_citations=False,
                              filter_no_terminal_punct=False, min_words_per_line=-1,
                              max_word_length=-1, filter_lorem_ipsum=True,
                              filter_javascript=False, filter_curly_bracket=True,
                              filter_policy=False, min_num_sentences=5),
    }


def datatrove_verdict(pack: str, text: str, doc_id: str = "") -> tuple[bool, str]:
    """(kept, datatrove's reason for removing it or "")."""
    from datatrove.data import Document
    res = filters()[pack].filter(Document(text=text, id=doc_id))
    if res is True:
        return True, ""
    return False, res[1] if isinstance(res, tuple) else "removed"
