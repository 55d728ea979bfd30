"""clean.py's kept signals, read back: every rule's measured number per document, so that a
rerun with other thresholds (or another rule added) measures only what was never measured.

The files and their index are pipeline.kept_store's; this module knows which of their
columns are still good for a recipe: a signal is taken only where the store holds the
version its rule declares (`signal_version`), so an edited rule is measured again and a
removed rule is not read.
"""

from __future__ import annotations

import sys

import pyarrow as pa
import pyarrow.parquet as pq

from algorithms.cleaning import Recipe, Signals
from pipeline import kept_store

from .clean_flags import lid_path, model_record


SIGNALS_VERSION = 2   # 2: the text's UTF-8 bytes are kept too (a sweep then reads no text)


# what a store written before signals were kept per rule holds: the tutorial's four
OLD_STORE_SIGNALS = {"chars": "1", "dup_line_share": "1", "longest_run": "1", "alnum_share": "1"}


def kept_signal_versions(pieces: list[dict]) -> dict[str, str]:
    """The signal columns every piece of a store holds, with the version of each."""
    common = None
    for piece in pieces:
        have = (piece.get("extra") or {}).get("signals", OLD_STORE_SIGNALS)
        common = dict(have) if common is None else {k: v for k, v in common.items()
                                                     if have.get(k) == v}
    return common or {}


def load_kept(sources: list[list[dict]], rows: int, rules
              ) -> tuple[Signals | None, list[str], list[list[dict]]]:
    """The unit's kept signals, merged from every store that covers it and passes its
    digest check, with the pieces of each store used; (None, notes, []) when none does.
    Only the signals of `rules` whose kept version is the rule's own are taken: a rule
    added since is measured, a rule removed since is not read; the language-ID calls
    (which depend on the model, kept in the store's depends_on) are always taken."""
    sig, notes, used = None, [], []
    for pieces in sources:
        versions = kept_signal_versions(pieces)
        names = [r.signal for r in rules if versions.get(r.signal) == r.signal_version]
        got = kept_store.verified_parts(pieces, notes)
        if got is None:
            continue
        parts = [pq.ParquetFile(pa.BufferReader(data)).read().slice(piece["offset"], piece["rows"])
                 for piece, data in got]
        got = Signals.from_table(pa.concat_tables(parts), names) if parts else Signals(0)
        if len(got) != rows:
            notes.append(f"kept signals cover {len(got)} rows, not {rows}: recomputed")
            continue
        used.append(pieces)
        if sig is None:
            sig = got
        else:
            sig.fill_from(got)
    return sig, notes, used


def signal_deps(run, recipe: Recipe) -> dict:
    """Everything the signals depend on: a change to any of these invalidates them."""
    return {"version": SIGNALS_VERSION, "input_fingerprint": run.input_fingerprint,
            "lid_model_xxh3_128": model_record(lid_path(run.args))["xxh3_128"],
            "lid_chars": recipe.lid_chars}


def signal_sources(run, recipe: Recipe) -> list:
    """For every unit, the kept signal files that cover it (from the output's signals/
    and from a sweep's side store); prints one line per store saying whether it is used."""
    recorded = kept_store.recorded_index_digest(run.output, "signals")   # as its manifest says
    found, notes = kept_store.sources(run.output, "signals",
                                      {"signals": (signal_deps(run, recipe), False)}, run.units,
                                      index_digests={"signals": recorded})
    for line in notes:
        print(line, file=sys.stderr)
    return found["signals"]
