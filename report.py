"""One self-contained HTML page of the whole run: what happened to the data, and is it right.

    python report.py                                    # reads data/, writes data/report.html
    python report.py --data-dir /big/data --output /tmp/run.html

Run it after any stage. The page is for the person who reviews a corpus before a training
run. A header sums the run up (documents and bytes in and out, tokens, the checklist, each
stage's state), then one section per topic:

  1 funnel          documents and bytes after each stage, the removals by reason
  2 cleaning        each rule's threshold, reach and examples of what it removed; the
                    measured signals' histograms with the thresholds drawn; the language
                    mix before and after; the threshold sweep of `clean.py --sweep`
  3 deduplication   exact-duplicate groups; MinHash clusters, verified candidate
                    similarities and the LSH S-curve around the threshold; the largest
                    clusters side by side with their differences marked
  4 tokenizer       compression against GPT-2, a Llama-style 32k vocabulary and cl100k
                    (compare_tokenizers.py); tokens per document; the training sample
  5 pack & verify   tokens, EOS, the train/val split, decoded windows, the checklist

Every stage that has not run yet is marked missing, with the command that runs it, and
every stage whose manifest check fails (pipeline.manifest.check_input: an upstream output
was rewritten after it was built, or a file it lists is gone or changed size) is marked stale, with the
check's message. The page reads only the manifests and the small report files the stages
write beside their output, never a corpus shard nor the kept signals/ or signatures/:
every histogram is drawn from counts a stage saved, so it takes seconds on a 30 GB corpus
as on the sample. It is one file, inline CSS and base64 PNG figures (matplotlib's Agg
backend, modest DPI), with no script and nothing fetched, under a Content-Security-Policy
that forbids fetching: it opens offline in any browser and can be mailed (< 5 MB). All
text that comes from the data is escaped, and control characters are shown as visible
symbols.
"""

from __future__ import annotations

import pipeline  # noqa: F401  (first, before numpy: see pipeline/__init__.py)

import time
from pathlib import Path

from pipeline.errors import StageError, run_stage
from pipeline.manifest import display_path
from pipeline.report.cleaning import section_cleaning
from pipeline.report.dedup import section_dedup
from pipeline.report.funnel import section_funnel
from pipeline.report.header import contents, header, run_summary, section_sources, summary_line
from pipeline.report.pack import section_pack
from pipeline.report.page import PAGE_TITLE, build_section, document
from pipeline.report.state import holds_stage_output, read_run
from pipeline.report.tokenizer import section_tokenizer
from pipeline.stage import ReportOutput, ReportRun, ReportStage

REPORT_NAME = "report.html"
MAX_BYTES = 5_000_000        # the page must stay mailable

# The page's sections, in order (pipeline/report/: one module each).
SECTIONS = [("funnel", "1. Funnel", section_funnel),
            ("cleaning", "2. Cleaning", section_cleaning),
            ("dedup", "3. Deduplication", section_dedup),
            ("tokenizer", "4. Tokenizer", section_tokenizer),
            ("pack", "5. Pack and verify", section_pack)]


def build_page(stage_run: ReportRun) -> ReportOutput:
    """The whole page: the run's state read, each section drawn from it, the header that
    sums them up, and the list of what was read, in one file."""
    t0 = time.perf_counter()
    run = read_run(stage_run.data)   # every step's manifest and its check
    parts = [build_section(run, sid, title, fn) for sid, title, fn in SECTIONS]
    toc = contents(run, SECTIONS, parts)
    summ = run_summary(run)
    parts.append(section_sources(run, time.perf_counter() - t0))
    toc.append(("sources", "About this page", ""))
    page = document(run.data, header(run, summ, toc) + "".join(parts))
    body = page.encode("utf-8", errors="replace")
    lines = [f"warning: {e}" for e in run.errors]
    if len(body) > MAX_BYTES:
        lines.append(f"warning: {stage_run.output} is {len(body) / 1e6:.1f} MB, over "
                     f"{MAX_BYTES / 1e6:.0f} MB")
    return ReportOutput(body, summary=lines + [summary_line(summ, len(body)),
                                               f"wrote {display_path(stage_run.output)}"])


def check(a) -> None:
    """The data folder the stages wrote, not one stage's output folder nor any other."""
    data = Path(a.data_dir)
    if (data / "manifest.json").is_file():   # raw/, cleaned/, ...: one stage's
        raise StageError(f"--data-dir {a.data_dir} is one stage's output folder (it holds a "
                         f"manifest.json); name the data folder that holds it: --data-dir "
                         f"{display_path(data.resolve().parent)}")
    if not holds_stage_output(data):   # an empty folder, a report subfolder
        raise StageError(f"--data-dir {a.data_dir} holds nothing a stage writes (no stage "
                         "folder with its manifest, no pack_manifest.json, no unfinished "
                         "run); name the data folder the stages wrote (default: data), or "
                         "run the pipeline first (make demo)")


STAGE = ReportStage("report", __doc__, build_page, report=(REPORT_NAME, PAGE_TITLE),
                    check=check, input_help="the data folder it reports on (default: data)")


def main(argv: list[str] | None = None) -> int:
    return STAGE.main(argv)


if __name__ == "__main__":
    run_stage(main)
