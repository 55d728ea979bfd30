"""pack_parallel.py's choice of encoder and its identity check: before any task, the fast
encoder must give HF tokenizers' ids on a sample of this corpus (the first documents of
every shard), or the stage warns and encodes with HF (--encoder auto), or stops (a fast
encoder asked for by name). HF encodes the sample in a thread of its own, started before
the worker pool is forked (build_encoders), while the driver builds the fast encoder and
starts its pool, on the core that would otherwise wait."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from algorithms import packing
from algorithms.packing import Encoder, NotConvertible, get_encoder
from algorithms.tokenizer_file import encode_bounded, plain_text

from .errors import StageError
from .shards import iter_batches, stage_shards


def sample_texts(shards: list[Path], max_bytes: int, per_shard: int = 64) -> list[str]:
    """A fixed sample for the identity check: the first documents of every shard, taken
    round-robin (different sources are in different shards) until max_bytes of text or
    the end of the input; each shard is read per_shard documents at a time, as far as
    needed (with 64 documents a shard and no more, one shard gave 130 KB of a 1 MB
    check). A document longer than what is left of max_bytes is cut to it: HF encodes
    the sample whole, and one 20 MB document took 3 GB and 15 s against a 1 MB budget."""
    readers = [iter_batches(s, columns=["text"], batch_rows=per_shard) for s in shards]
    heads: list[list[str]] = [[] for _ in shards]   # each shard's next documents, reversed
    out, size = [], 0
    while size < max_bytes:
        for k, r in enumerate(readers):
            if r is not None and not heads[k]:
                batch = next(r, None)
                if batch is None:
                    readers[k] = None
                else:
                    heads[k] = [t for t in batch.column(0).to_pylist() if t is not None][::-1]
        if not any(heads) and all(r is None for r in readers):
            break
        for h in heads:   # one round: a document from every shard that has one
            if h and size < max_bytes:
                text = h.pop()[:max_bytes - size]   # characters: at most 4 bytes each
                out.append(text)
                size += len(text.encode("utf-8"))
    return out


def first_difference(got: list[np.ndarray], want: list[np.ndarray]) -> int | None:
    """Index of the first text whose ids differ between two encodings of the same texts
    (the fast encoder's and HF's), else None."""
    for i, (x, y) in enumerate(zip(got, want)):
        if not np.array_equal(x, y):
            return i
    return None


class SampleCheck:
    """The identity check's HF side, started early: in a thread of its own, the sample
    (sample_texts) is read and encoded by HF, with a tokenizer of the thread's own (the
    vocabulary's ids, its added tokens' strings as plain text), while the caller goes on.
    Arrow's reads and HF's encoding release the GIL, so the check takes a core that
    waits anyway: pack's driver builds its fast encoder and starts its pool meanwhile.

    join() waits for the thread (before a fork: nothing may run beside a fork);
    difference(enc) waits too, then gives the index of the first sample text on which
    `enc` gives other ids than HF (first_difference's answer), or None."""

    def __init__(self, shards: list[Path], max_bytes: int, tokenizer_path: str | os.PathLike):
        self.texts: list[str] = []
        self.hf_ids: list[np.ndarray] = []
        self.seconds = 0.0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="identity-check", daemon=True,
                                        args=(list(shards), max_bytes, str(tokenizer_path)))
        self._thread.start()

    def _run(self, shards: list[Path], max_bytes: int, tokenizer_path: str) -> None:
        t0 = time.time()
        try:
            from tokenizers import Tokenizer

            texts = sample_texts(shards, max_bytes)
            with plain_text(Tokenizer.from_file(tokenizer_path)) as plain:
                self.hf_ids = [np.asarray(ids, dtype=np.uint32)
                               for ids in encode_bounded(plain, texts)]
            self.texts = texts
        except BaseException as e:   # raised again where the caller waits for it
            self._error = e
        self.seconds = round(time.time() - t0, 3)

    def join(self) -> None:
        self._thread.join()

    def difference(self, enc: Encoder) -> int | None:
        self.join()
        if self._error is not None:
            raise self._error
        return first_difference(enc.ids_many(self.texts), self.hf_ids)


def choose_encoder(run) -> tuple[str, dict]:
    """The encoder pack's tasks use, and what the manifest says of the choice: the fast one
    asked for when the tokenizer converts to it and it gives HF's ids on the sample of
    this corpus (the identity check, timed as the phase "identity_check"); else HF, with a
    warning (--encoder auto), or a one-line error (a fast encoder asked for by name)."""
    args = run.args
    kind, enc_info = fast_or_hf(args)
    check = identity_check(args, run.shards) if kind in packing.FAST_ENCODERS else None
    if kind in packing.FAST_ENCODERS:   # what the check compared (nothing with --check-bytes 0)
        enc_info.update(checked_docs=0, checked_bytes=0, check_seconds=0.0)
    if check is not None:   # the fast encoder against HF on the sample, before any task
        with run.phase("identity_check"):
            bad = check.difference(get_encoder(str(args.tokenizer), kind))
        enc_info.update(checked_docs=len(check.texts),
                        checked_bytes=sum(len(t.encode("utf-8")) for t in check.texts),
                        check_seconds=check.seconds)
        if bad is not None:
            why = (f"{kind} ids differ from HF on sample document {bad} "
                   f"({check.texts[bad][:60]!r})")
            if args.encoder != "auto":
                raise StageError(f"--encoder {kind}: {why}")
            print(f"warning: {why}; encoding with HF tokenizers (slower)", file=sys.stderr)
            kind, enc_info = "hf", {**enc_info, "fallback": why}
    return kind, enc_info


def fast_or_hf(args) -> tuple[str, dict]:
    """The encoder to try: the fast one asked for (auto: numba) when the tokenizer converts
    to it; else HF, with a warning (an explicitly requested fast encoder that cannot be
    used is an error instead). The encoder is built here and kept (packing.get_encoder):
    a task run in this process, or forked from it, uses it as it is."""
    info = {"requested": args.encoder}
    if args.engine == "reference":   # 5.5's encode_shard: HF's encode, document by document
        return "reference", info
    if args.encoder == "hf":
        return "hf", info
    kind = "numba" if args.encoder == "auto" else args.encoder
    try:
        get_encoder(str(args.tokenizer), kind)   # built once per process, kept
    except NotConvertible as e:
        if args.encoder != "auto":
            raise e
        print(f"warning: {e}; encoding with HF tokenizers (slower)", file=sys.stderr)
        return "hf", {**info, "fallback": e.why}
    return kind, info


# the identity check started before the pool (build_encoders), for the run it was made
# for, and the interpreter's switch interval to put back once its thread has ended
_CHECK: dict = {}
_SWITCH: list = []
CHECK_SWITCH_S = 0.0005


def identity_check(args, shards: list[Path]) -> SampleCheck | None:
    """The identity check of this run: the one build_encoders started, or one started
    now; None with --check-bytes 0."""
    check = _CHECK.pop(check_key(args, shards), None)
    if check is not None:
        overlap_ended(check)
    elif args.check_bytes > 0:
        check = SampleCheck(shards, args.check_bytes, args.tokenizer)
    return check


def check_key(args, shards: list[Path]) -> tuple:
    """What a started check was made for: the tokenizer, the sample's size, the input."""
    return str(args.tokenizer), args.check_bytes, tuple(map(str, shards))


def overlap_ended(check: SampleCheck) -> None:
    """Wait for the check's thread, then give the interpreter its switch interval back."""
    check.join()
    if _SWITCH:
        sys.setswitchinterval(_SWITCH.pop())


def build_encoders(args):
    """Before the worker pool is forked: the fast encoder every task builds the same way,
    built once here, so that the workers inherit it instead of each building it (about
    0.3 s a worker); and the identity check's HF side, begun in a thread meanwhile (it
    reads the input before this run locks it: only the sample's choice could change,
    never the output). Returns what the pool calls right before it forks: wait for that
    thread. A tokenizer that does not convert is reported later, by fast_or_hf."""
    # no HF thread pool in a process that forks its workers (a forked worker would wait
    # on the pool's threads forever); the check has a core of its own, each worker too
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _CHECK.clear()
    if _SWITCH:
        sys.setswitchinterval(_SWITCH.pop())
    kind = "numba" if args.encoder == "auto" else args.encoder
    if kind == "hf" or args.engine == "reference":
        return None
    shards = stage_shards(args.input)
    check = SampleCheck(shards, args.check_bytes, args.tokenizer) \
        if args.check_bytes > 0 else None
    if check is not None:
        _CHECK[check_key(args, shards)] = check
        # the thread needs the GIL back for a moment after each call into Arrow and HF;
        # with the default 5 ms it waited that long for this thread's imports each time
        # (1 MB checked in 0.55 s instead of 0.38 beside them)
        _SWITCH.append(sys.getswitchinterval())
        sys.setswitchinterval(CHECK_SWITCH_S)
    try:
        get_encoder(str(args.tokenizer), kind)
    except NotConvertible:
        pass
    return (lambda: overlap_ended(check)) if check is not None else None
