"""The user's evaluation sets, read once into the n-gram index of
algorithms/decontamination.py, kept on disk and rebuilt only when the files or the
settings change.

    --eval-sets PATH...            .jsonl (one JSON object a line), .parquet, or .txt (one
                                   item a line: the whole line is its text)
    --eval-question-field NAME     default "question" ('' for none: answers alone)
    --eval-answer-field NAME       default "answer" (a list: each element an answer)
    --decont-n N                   the n of the n-grams (default 13: GPT-3's)

Nothing is downloaded: a user names the files they evaluate on. A file that cannot be
read (missing, empty, a line that is not JSON or not UTF-8, a record without the field)
is one line naming the file and the line, exit 2, before any work.

The index is kept in a folder named by its key: a digest of every file's bytes (and
name), the fields and n, and the algorithm's version. `index.npz` holds the sorted n-gram
hashes and the item of each (12 bytes an n-gram: 12 MB a million, and a 4 MB bitmap once
loaded); `items.parquet` each item's set, number, question and answer (for the reports).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from algorithms import decontamination as D
from pipeline.errors import StageError

SUFFIXES = (".jsonl", ".json", ".parquet", ".txt")


def add_flags(p, where: str) -> None:
    """The flags of the evaluation sets (clean.py and verify.py)."""
    g = p.add_argument_group("decontamination (the decontaminate pack, verify's check)")
    g.add_argument("--eval-sets", nargs="+", default=None, metavar="PATH",
                   help=f"evaluation sets to keep out of {where}: .jsonl, .parquet or .txt "
                        "(one item a line); nothing is downloaded")
    g.add_argument("--eval-question-field", default="question", metavar="NAME",
                   help="the question (prompt) field of a .jsonl or .parquet record "
                        "(default question; '' for none)")
    g.add_argument("--eval-answer-field", default="answer", metavar="NAME",
                   help="the answer field (default answer; a list: each element an answer)")
    g.add_argument("--decont-n", type=int, default=D.NGRAM, metavar="N",
                   help=f"n of the word n-grams (a Chinese character is a word; default "
                        f"{D.NGRAM}, GPT-3's; datatrove uses 12)")


def check_flags(args) -> None:
    if args.decont_n < 1:
        raise StageError(f"--decont-n {args.decont_n}: must be at least 1")
    for path in args.eval_sets or []:
        p = Path(path)
        if not p.is_file():
            raise StageError(f"--eval-sets {path}: no such file")
        if p.suffix.lower() not in SUFFIXES:
            raise StageError(f"--eval-sets {path}: not .jsonl, .parquet or .txt")
    names = [Path(x).name for x in args.eval_sets or []]
    twice = [x for i, x in enumerate(names) if x in names[:i]]
    if twice:
        raise StageError(f"--eval-sets: two files named {twice[0]} (a set is known by its "
                         "file's name in the reports)")


# --------------------------------------------------------------------------------------
# Reading the items
# --------------------------------------------------------------------------------------

def _answers(value, where: str, field: str) -> list[str]:
    if value is None:
        raise StageError(f"{where}: the field {field!r} is empty (null)")
    values = value if isinstance(value, (list, tuple)) else [value]
    out = [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in values
           if v is not None]
    return [v for v in out if v.strip()]


def _question(record: dict, field: str, where: str) -> str | None:
    if not field:
        return None
    if field not in record:
        raise StageError(f"{where}: no field {field!r} (--eval-question-field; the record "
                         f"has {', '.join(map(repr, list(record)[:8])) or 'no fields'})")
    q = record[field]
    return q if isinstance(q, str) or q is None else json.dumps(q, ensure_ascii=False)


def _records(path: Path):
    """(where, record) of a .jsonl / .parquet file, or (where, line) of a .txt file."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError) as e:
            raise StageError(f"{path}: not a readable parquet file "
                             f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
                from None
        for i, rec in enumerate(table.to_pylist()):
            yield f"{path}: row {i + 1}", rec
        return
    with open(path, "rb") as f:
        for i, raw in enumerate(f, 1):
            where = f"{path}:{i}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise StageError(f"{where}: not UTF-8 text") from None
            if not line.strip():
                continue
            if suffix == ".txt":
                yield where, line.rstrip("\r\n")
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise StageError(f"{where}: not JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise StageError(f"{where}: a JSON {type(rec).__name__}, not an object")
            yield where, rec


def read_items(path: Path, question_field: str, answer_field: str) -> list[tuple]:
    """One file's items: (question or None, answer), one for each answer of a record."""
    items = []
    for where, rec in _records(path):
        if isinstance(rec, str):
            items.append((None, rec))
            continue
        if answer_field not in rec:
            raise StageError(f"{where}: no field {answer_field!r} (--eval-answer-field; the "
                             f"record has {', '.join(map(repr, list(rec)[:8])) or 'no fields'})")
        q = _question(rec, question_field, where)
        items += [(q, a) for a in _answers(rec[answer_field], where, answer_field)]
    if not items:
        raise StageError(f"{path}: no evaluation items in it (empty)")
    return items


# --------------------------------------------------------------------------------------
# The index, kept
# --------------------------------------------------------------------------------------

def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def settings(args) -> dict:
    """What the index depends on (the config records it): each file by name and digest."""
    return _settings(tuple(args.eval_sets), args.eval_question_field, args.eval_answer_field,
                     args.decont_n)


@functools.lru_cache(maxsize=None)   # the config and the index ask: each file read once
def _settings(paths: tuple, question_field: str, answer_field: str, n: int) -> dict:
    return {"files": [{"name": Path(p).name, "sha256": _digest(Path(p))} for p in paths],
            "question_field": question_field, "answer_field": answer_field, "n": n,
            "version": D.VERSION}


def key_of(s: dict) -> str:
    return hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest()[:16]


def index_folder(args, store: Path, keep_others: bool = False) -> Path:
    """The index of args.eval_sets, kept in store/KEY/ (built there, atomically, if it is
    not; other keys' folders removed, the store keeps the current index, unless
    keep_others: a sweep's other n)."""
    return _index_folder(tuple(args.eval_sets), args.eval_question_field,
                         args.eval_answer_field, args.decont_n, str(store), keep_others)


@functools.lru_cache(maxsize=None)
def _index_folder(paths: tuple, question_field: str, answer_field: str, n: int,
                  store: str, keep_others: bool) -> Path:
    s = _settings(paths, question_field, answer_field, n)
    folder = Path(store) / key_of(s)
    if not ((folder / "index.npz").is_file() and (folder / "items.parquet").is_file()):
        _build(paths, question_field, answer_field, n, s, folder)
    for other in Path(store).iterdir() if not keep_others else ():
        if other.is_dir() and other.name != folder.name and not other.name.startswith("."):
            shutil.rmtree(other, ignore_errors=True)
    return folder


def _build(paths: tuple, question_field: str, answer_field: str, n: int, s: dict,
           folder: Path) -> None:
    """The index of the files, written in a temporary folder, then renamed `folder`."""
    store = folder.parent
    sets, items = [], []
    for p in paths:
        got = read_items(Path(p), question_field, answer_field)
        sets += [(Path(p).name, i) for i in range(len(got))]
        items += got
    index = D.build_index(items, n)
    tmp = Path(store) / f".{folder.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    D.save_index(index, tmp / "index.npz")
    pq.write_table(pa.table({
        "set": [x[0] for x in sets], "number": [x[1] for x in sets],
        "question": [q for q, _ in items], "answer": [a for _, a in items],
        "ngrams": [len(D.item_ngrams(q, a, n)) for q, a in items]}),
        tmp / "items.parquet")
    (tmp / "settings.json").write_text(json.dumps(s, indent=1))
    try:
        tmp.rename(folder)
    except OSError:   # another run built it meanwhile: the same bytes
        shutil.rmtree(tmp, ignore_errors=True)


def summary(folder: Path) -> dict:
    """The index's sets: items, items with no n-gram (shorter than n: never found), and
    n-grams, per set; the index's size."""
    items = pq.read_table(folder / "items.parquet", columns=["set", "ngrams"]).to_pydict()
    out: dict[str, dict] = {}
    for name, grams in zip(items["set"], items["ngrams"]):
        s = out.setdefault(name, {"items": 0, "too_short": 0})
        s["items"] += 1
        s["too_short"] += grams == 0
    index = D.load_index(folder / "index.npz")
    return {"sets": out, "ngrams": int(len(index.hashes)), "n": index.n,
            "bytes": int((folder / "index.npz").stat().st_size)}
