"""report.py: one self-contained HTML page of the run, on full, partial, stale and hostile data.

The full run is the session's sample pipeline (copied) plus compare_tokenizers.py and
verify.py; the page is parsed with html.parser, its figures decoded, and it is rendered in
headless Chromium when one is installed.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import ROOT, run_script
from pipeline.report.charts import RC, log_scale, near_threshold, new_figure, similarity_split
from pipeline.report.diff import diff_pair, side_by_side
from pipeline.report.header import config_note
from pipeline.report.html import badge, esc, pre, show_text, table, visible
from pipeline.report.state import STAGES, TOOLS, stage_state

SECTIONS = ["funnel", "cleaning", "dedup", "tokenizer", "pack"]
HOSTILE = "<script>alert(1)</script></div>\x00\x07\x1b evil \u202e tail"
RAW_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


class Page(HTMLParser):
    """What the tests look at: tags and attributes, sections, images, text, nesting."""

    VOID = frozenset({"meta", "img", "br", "hr", "input", "link", "col", "wbr", "source"})

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.sections: dict[str, str] = {}
        self.stages: dict[str, str] = {}      # stage row of the header table -> status
        self.boxes: list[tuple[str, str]] = []  # (class, data-step) of missing/stale boxes
        self.text: list[str] = []
        self.styles: list[str] = []
        self.depth_errors = 0
        self._stack: list[str] = []
        self._in_style = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        self.tags.append((tag, a))
        if tag == "section":
            self.sections[a.get("id", "")] = a.get("data-status", "")
        if tag == "tr" and "data-stage" in a:   # the header's table comes first
            self.stages.setdefault(a["data-stage"], a.get("data-status", ""))
        if tag == "div" and a.get("class", "").split() and \
                a["class"].split()[0] in ("missing", "stale"):
            self.boxes.append((a["class"].split()[0], a.get("data-step", "")))
        if tag == "style":
            self._in_style = True
        if tag not in self.VOID:
            self._stack.append(tag)

    def handle_endtag(self, tag):
        if tag == "style":
            self._in_style = False
        if not self._stack or self._stack[-1] != tag:
            self.depth_errors += 1
            if tag in self._stack:
                while self._stack and self._stack.pop() != tag:
                    pass
            return
        self._stack.pop()

    def handle_data(self, data):
        (self.styles if self._in_style else self.text).append(data)

    @property
    def all_text(self) -> str:
        return "".join(self.text)

    def images(self) -> list[str]:
        return [a.get("src", "") for t, a in self.tags if t == "img"]


def make_report(data: Path, *extra: str) -> tuple[str, str]:
    cp = run_script("report.py", "--data-dir", data, *extra)
    out = data / "report.html"
    return out.read_text(encoding="utf-8"), cp.stdout


@pytest.fixture(scope="module")
def full_run(pipeline_layout, tmp_path_factory) -> tuple[Path, str, str]:
    """The sample pipeline, then compare_tokenizers.py and verify.py, then report.py."""
    d = tmp_path_factory.mktemp("report_full") / "data"
    shutil.copytree(pipeline_layout, d, symlinks=True)
    run_script("compare_tokenizers.py", "--tokenizer", d / "tokenizer" / "tokenizer.json")
    run_script("verify.py", "--data-dir", d, check=False)  # the page shows PASS and FAIL alike
    assert (d / "verify_report.json").exists()
    html, out = make_report(d)
    return d, html, out


# --- the full run ------------------------------------------------------------------------

def test_full_run_shows_every_section_fresh(full_run):
    _, html, out = full_run
    page = Page(html)
    assert page.depth_errors == 0
    for sid in SECTIONS:
        assert page.sections.get(sid) == "ok", (sid, page.sections)
    assert set(page.stages) == {s.key for s in STAGES + TOOLS}
    assert set(page.stages.values()) == {"ok"}, page.stages
    assert page.boxes == []                       # nothing missing, nothing stale
    text = page.all_text
    for needle in ["Funnel", "removed by reason", "too_short", "char_repeat", "lang",
                   "Language mix", "Exact duplicates", "Near duplicates",
                   "Largest clusters", "GPT-2", "cl100k", "Training sample",
                   "Tokens per document", "Acceptance checklist", "Decoded windows",
                   "held-out documents cropped"]:
        assert needle in text, needle
    # the checklist: one row per verify item, each PASS or FAIL
    items = [a for t, a in page.tags if t == "tr" and "data-item" in a]
    assert len(items) == 10 and {a["data-result"] for a in items} <= {"pass", "fail"}
    # each cleaning rule: a histogram with its threshold and 3-5 examples
    rules = [a["data-rule"] for t, a in page.tags if t == "div" and "data-rule" in a]
    assert rules == ["too_short", "dup_lines", "char_repeat", "low_alnum", "lang"]
    examples = re.findall(r'<div class="rule" data-rule="(\w+)">(.*?)(?=<div class="rule"|<h3)',
                          html, re.DOTALL)
    for rule, block in examples:
        assert 3 <= block.count('<div class="ex">') <= 5, rule
        assert "histogram of" in block, rule
    # the near-duplicate diff marks the differences
    assert "<del>" in html and "<ins>" in html
    # the one-line summary and the path
    lines = out.strip().splitlines()
    assert lines[0].startswith("report: 6 of 6 stages run, none stale")
    assert "tokens" in lines[0] and lines[1].startswith("wrote ") and \
        lines[1].endswith("report.html")


def test_figures_decode_and_nothing_is_fetched(full_run):
    _, html, _ = full_run
    page = Page(html)
    srcs = page.images()
    assert len(srcs) >= 12
    for src in srcs:
        assert src.startswith("data:image/png;base64,"), src[:60]
        img = mpimg.imread(io.BytesIO(base64.b64decode(src.split(",", 1)[1])), format="png")
        assert img.shape[0] > 100 and img.shape[1] > 200
        assert float(np.std(img[..., :3])) > 0.02        # not a blank canvas
    # no script, no external stylesheet or frame, every link inside the page
    tags = {t for t, _ in page.tags}
    assert not tags & {"script", "link", "iframe", "object", "embed", "frame", "base"}
    for t, a in page.tags:
        for k, v in a.items():
            if k in ("src", "href", "srcset", "action", "poster", "data", "background",
                     "formaction"):
                assert v.startswith("#") or (t == "img" and k == "src" and re.fullmatch(
                    r"data:image/png;base64,[A-Za-z0-9+/=]+", v)), (t, k, v[:80])
            elif k != "content":   # the CSP meta: default-src 'none'; img-src data: ...
                assert "url(" not in v.lower() and not re.search(r"(https?:)?//", v), (t, k, v)
    csp = [a["content"] for t, a in page.tags if t == "meta" and "content" in a and
           a.get("http-equiv", "").lower() == "content-security-policy"]
    assert csp and "default-src 'none'" in csp[0]
    css = "".join(page.styles)
    assert "url(" not in css and "@import" not in css and "http" not in css
    assert not re.search(r"<style[^>]*\bsrc=", html)


def test_page_is_small(full_run):
    d, html, _ = full_run
    size = (d / "report.html").stat().st_size
    assert size < 5_000_000, size
    assert size == len(html.encode("utf-8"))


# --- partial and stale runs --------------------------------------------------------------

def test_partial_run_marks_missing_sections_with_the_command(pipeline_layout, tmp_path):
    d = tmp_path / "data"
    for sub in ("raw", "cleaned"):
        shutil.copytree(pipeline_layout / sub, d / sub)
    html, out = make_report(d)
    page = Page(html)
    assert page.sections["cleaning"] == "ok"
    assert page.sections["funnel"] == "partial"
    for sid in ("dedup", "tokenizer", "pack"):
        assert page.sections[sid] == "missing", (sid, page.sections)
        block = re.search(rf'<section id="{sid}".*?</section>', html, re.DOTALL).group(0)
        assert 'class="missing"' in block
    assert page.stages["download_data"] == page.stages["clean"] == "ok"
    for key in ("dedup_exact", "dedup_minhash", "train_tokenizer", "pack_parallel",
                "compare_tokenizers", "verify"):
        assert page.stages[key] == "missing"
    text = page.all_text
    for script in ("dedup_exact.py --input", "dedup_minhash.py", "train_tokenizer.py",
                   "pack_parallel.py", "compare_tokenizers.py", "verify.py --data-dir"):
        assert f"python {script}" in text, script
    assert out.startswith("report: 2 of 6 stages run")


def test_rerun_upstream_marks_the_stages_below_stale(pipeline_layout, tmp_path):
    d = tmp_path / "data"
    for sub in ("raw", "cleaned", "dedup_exact", "dedup"):
        shutil.copytree(pipeline_layout / sub, d / sub)
    # another threshold: cleaned/ is rewritten with other documents
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned", "--min-chars", "600",
               "--workers", "2")
    html, out = make_report(d)
    page = Page(html)
    assert page.stages["clean"] == "ok"
    assert page.stages["dedup_exact"] == page.stages["dedup_minhash"] == "stale"
    assert page.sections["dedup"] == "stale" and page.sections["cleaning"] == "ok"
    assert ("stale", "dedup_exact") in page.boxes and ("stale", "dedup_minhash") in page.boxes
    assert "rerun dedup_exact.py" in page.all_text
    assert "stale: dedup_exact, dedup_minhash" in out
    # a manifest that is JSON but not an object is a broken stage, not a traceback
    good = (d / "raw" / "manifest.json").read_text()
    m = json.loads(good)
    for bad in ("[]", json.dumps({**m, "counts": [1, 2]}), json.dumps({**m, "files": [3]}),
                json.dumps({**m, "input": "raw"})):   # ... or with a field of another type
        (d / "raw" / "manifest.json").write_text(bad)
        html, out = make_report(d)
        assert "stale: download_data, clean, dedup_exact, dedup_minhash" in out, out
        assert "unreadable manifest" in Page(html).all_text


def test_a_damaged_data_folder_still_gives_a_page(full_run, tmp_path):
    """Counts edited into strings, a zero where a report divides, a folder where a report
    or a manifest goes: the page is still drawn, the damage named on it."""
    d = tmp_path / "data"
    shutil.copytree(full_run[0], d, symlinks=True)

    def edit(rel, fn):
        m = json.loads((d / rel).read_text())
        fn(m)
        (d / rel).write_text(json.dumps(m))

    edit("raw/manifest.json", lambda m: m["counts"].update(rows="2041", text_bytes="big"))
    edit("pack_manifest.json", lambda m: m["counts"].update(tokens="many"))
    edit("verify_report.json", lambda m: m.update(items="abc"))
    edit("dedup/report/dedup_minhash_stats.json", lambda m: m["config"].update(bands=0))
    lang = d / "cleaned" / "report" / "removed_lang.jsonl"
    lang.unlink()
    lang.mkdir()
    html, out = make_report(d)
    page = Page(html)
    assert "Funnel" in page.all_text and "removed_lang.jsonl: unreadable" in page.all_text
    (d / "cleaned" / "report" / "clean_stats.json").write_text("{not json")
    html, out = make_report(d)
    assert "cleaned/report/clean_stats.json is unreadable: rerun" in Page(html).all_text
    (d / "dedup" / "manifest.json").unlink()
    (d / "dedup" / "manifest.json").mkdir()
    html, out = make_report(d)
    assert Page(html).stages["dedup_minhash"] == "unreadable"
    assert "unreadable manifest" in Page(html).all_text


def test_an_unreadable_pack_manifest_names_pack_in_any_data_folder(full_run, tmp_path):
    """pack writes its manifest into the data folder itself: a damaged one names
    pack_parallel.py to rerun, whatever the folder is called (a data folder not named
    'data' got 'rerun the stage that writes it')."""
    d = tmp_path / "run1"
    shutil.copytree(full_run[0], d, symlinks=True)
    (d / "pack_manifest.json").write_text("{trunc")
    html, out = make_report(d)
    page = Page(html)
    assert page.stages["pack_parallel"] == "unreadable"
    assert "pack_manifest.json: unreadable manifest" in page.all_text
    assert "rerun pack_parallel.py" in page.all_text
    assert "the stage that writes it" not in page.all_text


def test_pack_beside_an_unreadable_tokenizer_manifest_cannot_be_checked(full_run, tmp_path):
    """data/tokenizer/manifest.json damaged: pack's tokenizer cannot be compared with the
    one it was packed with, so pack is not shown "ok" beside it (it was)."""
    d = tmp_path / "run1"
    shutil.copytree(full_run[0], d, symlinks=True)
    (d / "tokenizer" / "manifest.json").write_text("{trunc")
    page = Page(make_report(d)[0])
    assert page.stages["train_tokenizer"] == "unreadable"
    assert page.stages["pack_parallel"] == "stale"
    assert "train.bin cannot be checked" in page.all_text
    assert "rerun train_tokenizer.py, then pack_parallel.py" in page.all_text


def test_a_run_that_did_not_finish_is_named_beside_its_stage(full_run, tmp_path):
    """A clean.py run that stopped (a rule of the user's raised in its tasks) leaves its
    work in data/.cleaned.partial; the page keeps showing the last finished run, and now
    says that one did not finish, where its work waits, and that the command resumes it."""
    d = tmp_path / "data"
    shutil.copytree(full_run[0], d, symlinks=True)
    html, _ = make_report(d)
    assert "has not finished" not in Page(html).all_text
    rule = tmp_path / "boom.py"
    rule.write_text("from algorithms.cleaning import Rule\n"
                    "def boom(texts):\n    raise RuntimeError('boom')\n"
                    "RULES = [Rule('x', 'd', 'xs', boom, 0.5, 'below', '--x-min', "
                    "bins=(0, 1))]\n")
    cp = run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned",
                    "--rules", f"tutorial,{rule}", check=False)
    assert cp.returncode == 2 and (d / ".cleaned.partial").is_dir(), cp.stderr
    html, _ = make_report(d)
    page = Page(html)
    text = page.all_text
    assert "a run that has not finished (stopped, or still running) keeps its work in " \
           f"{d / '.cleaned.partial'}" in text
    assert text.count("has not finished") == 1 and page.stages["clean"] == "ok"


def test_a_sweep_from_other_settings_or_input_is_not_this_runs(pipeline_layout, tmp_path):
    """A sweep's report outlives later runs: after clean runs again with another threshold,
    or dedup_minhash on another input, the page says the sweep is from then and marks no
    row "(this run)"."""
    d = tmp_path / "data"
    for sub in ("raw", "cleaned", "dedup_exact", "dedup"):
        shutil.copytree(pipeline_layout / sub, d / sub)
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned",
               "--sweep", "min_chars=100,200,600")
    run_script("dedup_minhash.py", "--input", d / "dedup_exact", "--output", d / "dedup",
               "--sweep", "threshold=0.7,0.8,0.9")
    html, _ = make_report(d)
    assert html.count("(this run)") == 2 and "This sweep was run" not in html
    # the tuning loop: a value chosen from the sweep and rerun; the sweep still holds
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned", "--min-chars", "100")
    html, _ = make_report(d)
    assert "This sweep was run" not in html and "100 (this run)" in html
    assert "200 (this run)" not in html
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned", "--min-chars", "600",
               "--min-alnum", "0.4")
    run_script("dedup_exact.py", "--input", d / "cleaned", "--output", d / "dedup_exact")
    run_script("dedup_minhash.py", "--input", d / "dedup_exact", "--output", d / "dedup",
               "--threshold", "0.9")
    html, _ = make_report(d)
    text = Page(html).all_text
    assert "(this run)" not in html
    assert "This sweep was run with other settings than the output in place (min_alnum 0.5 " \
           "then, 0.4 now)" in text
    assert "This sweep was run on an earlier dedup_exact/ output" in text


def test_sweeps_mark_this_run_only_beside_the_settings_in_place(pipeline_layout, tmp_path):
    """Two sweeps, then a run with a value of one of them: the other sweep's rows were
    made beside the old value, so they are stale (they were marked "this run", because a
    setting swept by any sweep was left out of every sweep's check). A per-language sweep
    marks the language's value in place (it never marked any)."""
    d = tmp_path / "data"
    shutil.copytree(pipeline_layout / "raw", d / "raw")
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned")
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned",
               "--sweep", "min_chars=200,600", "--sweep", "max_dup_lines=0.3,0.5")
    html, _ = make_report(d)
    assert "200 (this run)" in html and "0.3 (this run)" in html
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned", "--min-chars", "600")
    text = Page(make_report(d)[0]).all_text
    assert "600 (this run)" in text and "0.3 (this run)" not in text
    assert ("This sweep was run with other settings than the output in place (min_chars 200 "
            "then, 600 now): its rows of max_dup_lines") in text
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned", "--min-chars",
               "en=200,zh=80")
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned", "--min-chars",
               "en=200,zh=80", "--sweep", "min_chars@zh=50,80,600")
    text = Page(make_report(d)[0]).all_text
    assert "80 (this run)" in text and "50 (this run)" not in text


def test_pack_with_a_tokenizer_from_elsewhere_is_judged_by_that_one(full_run, tmp_path):
    """pack --tokenizer outside the data folder: the page checks pack against the tokenizer
    it read (it compared data/tokenizer/, unused, and called pack stale, or called the
    tokenizer's folder gone), and calls pack stale when that tokenizer is rewritten."""
    d = tmp_path / "data"
    shutil.copytree(full_run[0], d, symlinks=True)
    elsewhere = tmp_path / "shared" / "tokenizer"
    shutil.move(str(d / "tokenizer"), str(elsewhere))
    run_script("pack_parallel.py", "--input", d / "dedup", "--output", d,
               "--tokenizer", elsewhere / "tokenizer.json", "--force")   # (same bytes)
    html, _ = make_report(d)
    page = Page(html)
    assert page.stages["pack_parallel"] == "ok" and page.stages["train_tokenizer"] == "missing"
    assert "is gone while steps below it ran" not in page.all_text
    m = json.loads((elsewhere / "manifest.json").read_text())
    m["output_fingerprint"] = "0" * 32
    (elsewhere / "manifest.json").write_text(json.dumps(m))
    page = Page(make_report(d)[0])
    assert page.stages["pack_parallel"] == "stale"
    assert "the tokenizer it was packed with" in page.all_text and "was rewritten" in page.all_text


def test_values_read_from_report_files_are_escaped(full_run, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(full_run[0], d, symlinks=True)
    f = d / "dedup" / "report" / "dedup_minhash_stats.json"
    m = json.loads(f.read_text())
    bad = "<img src=x onerror=alert(1)>"
    assert m["largest_clusters"] and len(m["largest_clusters"][0]["members"]) > 1
    m["largest_clusters"][0]["size"] = bad
    m["largest_clusters"][0]["members"][1]["similarity"] = bad
    f.write_text(json.dumps(m))
    html, _ = make_report(d)
    assert bad not in html and html.count("&lt;img src=x onerror") >= 2


def test_the_lang_caption_counts_what_the_histogram_holds(full_run):
    """The language rule also removes confident documents in a language not asked for:
    the caption splits its removals by side of the threshold as the histogram does."""
    d, html, _ = full_run
    stats = json.loads((d / "cleaned" / "report" / "clean_stats.json").read_text())
    h = stats["histograms"]["lang_conf"]
    t = stats["config"]["min_lang_conf"]
    removed = h["by_outcome"]["lang"]
    below = sum(c for hi, c in zip(h["bins"][1:], removed) if hi <= t + 1e-9)
    other = sum(removed) - below
    assert other > 0       # the sample has confident documents in other languages
    text = Page(html).all_text
    assert (f"{sum(removed):,} documents removed by lang: {below:,} on the removed side of "
            f"{t:g} (red), {other:,} not") in text


def test_a_tool_that_read_a_stale_stage_is_stale(full_run, tmp_path):
    """verify.py's checklist is about outputs that no longer follow from their inputs
    once a stage above it is stale, though the files it read are unchanged."""
    d = tmp_path / "data"
    shutil.copytree(full_run[0], d, symlinks=True)
    shard = sorted((d / "dedup").glob("*.parquet"))[0]
    shard.write_bytes(shard.read_bytes() + b"x")     # changed after its manifest was written
    html, out = make_report(d)
    page = Page(html)
    assert page.stages["dedup_minhash"] == "stale" and page.stages["verify"] == "stale"
    assert "verify_report.json was made from dedup/manifest.json, which is stale" in page.all_text
    assert page.stages["clean"] == page.stages["dedup_exact"] == "ok"
    # an intermediate folder deleted: what was made from it stays usable and is shown;
    # the next step says it is gone, and verify that it read it
    shard.write_bytes(shard.read_bytes()[:-1])
    shutil.rmtree(d / "cleaned")
    html, out = make_report(d)
    page = Page(html)
    assert page.stages["clean"] == "missing" and page.stages["dedup_exact"] == "ok"
    assert "Next: the output of clean.py is gone while steps below it ran" in page.all_text
    assert "cleaned/manifest.json is gone; rerun verify.py" in page.all_text


# --- hostile text ------------------------------------------------------------------------

@pytest.mark.parametrize("render", [
    lambda s: show_text(s),
    lambda s: esc(s),
    lambda s: pre(s),
    lambda s: table(["h"], [[s]]),
    lambda s: diff_pair(s, "x " + s)[0] + diff_pair(s, "x " + s)[1],
    lambda s: side_by_side(esc(s), s, esc(s), s + " more"),
])
def test_rendering_escapes_markup_and_shows_controls(render):
    for s in (HOSTILE, "a\ud800b\x85c\u2028d&amp;", "</pre></div><img src=x onerror=alert(1)>"):
        out = render(s)
        assert "<script" not in out and "</div><img" not in out and "<img" not in out
        assert not RAW_CONTROLS.search(out)
        out.encode("utf-8")                                  # no lone surrogate left
        page = Page(f"<div>{out}</div>")
        assert page.depth_errors == 0 and {t for t, _ in page.tags} <= {
            "div", "pre", "span", "del", "ins", "table", "thead", "tbody", "tr", "th", "td", "p"}
    shown = show_text(HOSTILE)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;/div&gt;" in shown
    assert "\u2400\u2407\u241b" in shown and "U+202E" in shown   # ␀ ␇ ␛, the bidi override
    assert show_text("x" * 1000, 100).count("x") == 100 and "+900" in \
        show_text("x" * 1000, 100)


def test_hostile_document_is_escaped_end_to_end(tmp_path):
    prose = ("The committee met on Tuesday to review the budget for the new library. After a "
             "long discussion, members agreed to fund the children's reading room first and to "
             "look for private donors for the remaining work on the roof and heating. ")
    texts = [prose * 2 + f"Note {i}." for i in range(12)]
    texts.append(HOSTILE)                                            # too_short
    texts.append(prose + "<script>alert(2)</script>\x00" + "=" * 80 + "</div>" + prose)  # run
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"text": texts}), tmp_path / "in" / "hostile.parquet")
    d = tmp_path / "data"
    run_script("download_data.py", "--input", tmp_path / "in" / "hostile.parquet",
               "--output", d / "raw")
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned", "--workers", "2")
    html, _ = make_report(d)
    raw_bytes = (d / "report.html").read_bytes()
    assert not RAW_CONTROLS.search(raw_bytes.decode("utf-8"))
    assert b"<script" not in raw_bytes
    page = Page(html)
    assert page.depth_errors == 0
    assert not {t for t, _ in page.tags} & {"script", "iframe"}
    text = page.all_text
    assert "<script>alert(1)</script></div>\u2400\u2407\u241b evil" in text   # shown as text
    assert "<script>alert(2)</script>\u2400===" in text
    assert set(SECTIONS) <= set(page.sections)


# --- the browser -------------------------------------------------------------------------

def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def test_page_renders_in_headless_chromium(full_run, tmp_path):
    exe = chromium()
    if exe is None:
        pytest.skip("no chromium installed (apt-get install chromium)")
    d, _, _ = full_run
    shot = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as profile:
        cp = subprocess.run(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", f"--user-data-dir={profile}", f"--screenshot={shot}",
             "--window-size=1280,12000", (d / "report.html").resolve().as_uri()],
            capture_output=True, text=True, timeout=120, check=False)
    assert shot.exists(), cp.stderr[-2000:]
    from PIL import Image  # matplotlib's own dependency; uint8 keeps 1280x12000 small

    img = np.asarray(Image.open(shot).convert("RGB")).astype(np.int16)
    assert img.shape[:2] == (12000, 1280)
    assert float(img.std()) > 10                            # not blank
    bg = img[5, 5]                                            # the page background
    rows = np.flatnonzero((np.abs(img - bg).sum(axis=2) > 12).any(axis=1))
    assert rows.max() > 4000                                 # far longer than one screen
    # content all the way down: a row of ink in every 800 px band to 4000 px
    assert all(((rows >= y) & (rows < y + 800)).any() for y in range(0, 4000, 800))


# --- bad input ---------------------------------------------------------------------------

def test_missing_data_dir_is_one_line_error(tmp_path):
    cp = run_script("report.py", "--data-dir", tmp_path / "nope", check=False)
    assert cp.returncode == 2
    assert cp.stderr.startswith("error: ") and len(cp.stderr.strip().splitlines()) == 1
    assert "nope" in cp.stderr and cp.stdout == ""


def test_a_stage_folder_as_data_dir_is_one_line_error(layout_copy):
    """--data-dir data/raw: the page said no stage had run, told the user to run
    download_data.py --output data/raw/raw, and left report.html inside raw/."""
    d = layout_copy
    before = sorted(p.name for p in (d / "raw").iterdir())
    cp = run_script("report.py", "--data-dir", d / "raw", check=False)
    assert cp.returncode == 2 and cp.stdout == ""
    assert cp.stderr.startswith("error: ") and len(cp.stderr.strip().splitlines()) == 1
    assert f"--data-dir {d / 'raw'} is one stage's output folder" in cp.stderr
    assert cp.stderr.strip().endswith(f"--data-dir {d}")
    assert sorted(p.name for p in (d / "raw").iterdir()) == before


def test_a_folder_no_stage_wrote_into_is_one_line_error(layout_copy, tmp_path):
    """An empty folder, or a report folder inside the data folder, as --data-dir: the page
    said 0 of 6 stages had run and was written there (into any folder a typo named)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    for d in (empty, layout_copy / "raw" / "report"):
        before = sorted(p.name for p in d.iterdir())
        cp = run_script("report.py", "--data-dir", d, check=False)
        assert cp.returncode == 2 and cp.stdout == "", cp.stdout
        assert cp.stderr.startswith("error: ") and len(cp.stderr.strip().splitlines()) == 1
        assert f"--data-dir {d} holds nothing a stage writes" in cp.stderr
        assert sorted(p.name for p in d.iterdir()) == before
    # an unfinished first run is something: the page names it
    (empty / ".raw.partial").mkdir()
    assert run_script("report.py", "--data-dir", empty).returncode == 0


# --- small functions ---------------------------------------------------------------------

def test_near_threshold_counts_each_side():
    edges = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 1.0]
    counts = [5, 4, 3, 2, 1, 10]
    n = near_threshold(edges, counts, 0.3, "above", log=False)
    # "above": a value equal to 0.3 is kept, so the bin [0.3, 0.4) holds both sides
    assert n["removed_side"] == 11 and n["kept_side"] == 12 and n["straddling"] == 2
    assert n["near_kept"] == 3 and n["near_removed"] == 0    # bins within 0.1 of 0.3
    n = near_threshold(edges, counts, 0.3, "below", log=False)
    assert n["removed_side"] == 12 and n["kept_side"] == 13 and n["straddling"] == 0
    # the window stays within the histogram: "0 to 0.1" for a threshold of 0, not "-0.1"
    assert near_threshold(edges, counts, 0.0, "above", log=False)["window"] == (0.0, 0.1)
    assert near_threshold(edges, counts, 1.0, "below", log=False)["window"] == (0.9, 1.0)
    n = near_threshold([0, 10, 100, 200, 400, 1000], [1, 2, 3, 4, 5], 200, "below",
                              log=True)
    assert n["removed_side"] == 6 and n["near_removed"] == 3 and n["near_kept"] == 4
    # 0.8 - 0.1 is 0.7000000000000001 in floats: the bin from 0.70 is still near 0.8
    edges = np.linspace(0, 1, 51).tolist()
    counts = [0] * 50
    counts[35] = 1                                   # [0.70, 0.72)
    counts[45] = 2                                   # [0.90, 0.92): outside the window
    n = near_threshold(edges, counts, 0.8, "below", log=False)
    assert n["near_removed"] == 1 and n["removed_side"] == 1 and n["straddling"] == 0
    assert n["near_kept"] == 0 and n["kept_side"] == 2
    # a signal that is no share (a mean word length, bins 0.5 wide from 0 to 15): the
    # window is a tenth of its range, not 0.1, which held no whole bin ("0 just removed")
    edges = np.linspace(0, 15, 31).tolist()
    counts = [0] * 30
    counts[4], counts[5], counts[6], counts[20] = 3, 4, 5, 9   # [2, 2.5), [2.5, 3), [3, 3.5)
    n = near_threshold(edges, counts, 3.0, "below", log=False)
    assert n["window"] == (1.5, 4.5)
    assert n["near_removed"] == 7 and n["near_kept"] == 5 and n["kept_side"] == 14


def test_similarity_split_takes_the_stages_count_inside_a_bin():
    e = np.linspace(0, 1, 51)
    c = np.zeros(50)
    c[40], c[41], c[45] = 3, 5, 7         # [0.80, 0.82), [0.82, 0.84), [0.90, 0.92)
    left, inside, rej, acc = similarity_split(e, c, 0.83, 4)   # 1 of the 5 below 0.83
    assert (rej, acc) == (4, 11) and inside.sum() == 1 and inside[41]
    left, inside, rej, acc = similarity_split(e, c, 0.84, None)
    assert (rej, acc) == (8, 7) and not inside.any()


def test_config_note_names_what_download_read():
    local = {"config": {"dataset": None, "source": {"local": "corpus/*.jsonl", "files": []}}}
    assert config_note("download_data", local) == "local files corpus/*.jsonl"
    hub = {"config": {"dataset": "tinystories", "source": {"hub": "r/ts", "commit": "a" * 40}}}
    assert config_note("download_data", hub) == "dataset tinystories; r/ts at commit " \
        + "a" * 12


def test_stage_state_missing_names_the_command(tmp_path):
    st = stage_state(tmp_path, STAGES[2])
    assert st.state == "missing" and not st.ran
    assert "python dedup_exact.py --input" in st.message


def test_download_bad_records_are_counted_once_in_the_funnel(tmp_path):
    """Skipped bad records are listed by reason; their total was added as a reason of its
    own ("bad_records 2"), counting each twice."""
    src = tmp_path / "bad.jsonl"
    src.write_text('{"id":"a","text":"hello world"}\nnot json\n{"id":"b","text":123}\n'
                   '{"id":"c","text":"another doc"}\n')
    d = tmp_path / "data"
    run_script("download_data.py", "--input", src, "--output", d / "raw", "--on-bad-record", "skip")
    text = Page(make_report(d)[0]).all_text
    assert "skipped: invalid JSON 1, skipped: non-string text 1" in text
    assert "bad_records 2" not in text   # the total, a second time


def test_rule_captions_count_the_bin_holding_the_threshold(pipeline_layout, tmp_path):
    """--min-chars 600 falls inside a bin: its documents were said to be 'removed on
    another ground'. A '$' in a rule file's description made matplotlib parse a formula
    and the whole cleaning section was lost; it is drawn as text. A stage that kept
    nothing is the next step (the page said to run the next stage, which refuses)."""
    d = tmp_path / "data"
    shutil.copytree(pipeline_layout / "raw", d / "raw")
    rule = tmp_path / "dollar.py"
    rule.write_text((ROOT / "docs" / "examples" / "line_ends_rule.py").read_text().replace(
        '"under this share of lines end like a sentence"', '"lines ending in $ or ^$ marks"'))
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned", "--min-chars", "600",
               "--rules", f"tutorial,{rule}")
    page = Page(make_report(d)[0])
    text = page.all_text
    assert "could not be drawn" not in text, text[text.find("could not be drawn") - 300:][:600]
    assert any(a.get("alt") == "histogram of line_end_share" for t, a in page.tags if t == "img")
    too_short = text[text.index("removed by too_short:"):][:300]
    assert "in the bin holding 600" in too_short and "another ground" not in too_short
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned",
               "--min-chars", "10000000")
    text = Page(make_report(d)[0]).all_text
    assert "Next: clean.py kept no document, so nothing after it can run" in text
    assert "Next: run python dedup_exact.py" not in text


def test_a_missing_or_unreadable_report_file_is_named_as_such(full_run, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(full_run[0], d, symlinks=True)
    (d / "pack_report" / "pack_stats.json").unlink()
    comp = d / "tokenizer" / "report" / "compression.json"
    comp.write_text(comp.read_text()[:200])
    text = Page(make_report(d)[0]).all_text
    assert "pack_report/pack_stats.json is missing" in text
    assert "has no tokens_per_doc histogram" not in text
    assert "The comparison with GPT-2, a Llama-style 32k vocabulary and cl100k is unreadable" in text


def test_log_axes_are_labelled_in_plain_numbers():
    """matplotlib labels a log axis with formulas ($10^{3}$); with the page's
    text.parse_math off they showed as such under every log histogram. Every log axis of
    the page goes through log_scale, whose labels are plain numbers."""
    import re

    from matplotlib import rc_context

    def labels(axis):
        return [t.get_text() for t in axis.get_ticklabels() + axis.get_ticklabels(minor=True)
                if t.get_text()]

    with rc_context(RC):
        fig, ax = new_figure(figsize=(4, 3))
        log_scale(ax, "y")
        ax.bar([1, 2], [5, 20_000])
        log_scale(ax, "x")
        ax.set_xlim(3, 10)              # less than a decade: 5 is labelled too
        fig.canvas.draw()
        ys, xs = labels(ax.yaxis), labels(ax.xaxis)
        fig2, ax2 = new_figure(figsize=(4, 3))
        log_scale(ax2, "x", base=2)
        ax2.set_xlim(1, 4096)
        fig2.canvas.draw()
        twos = labels(ax2.xaxis)
    assert {"10", "1,000", "10,000"} <= set(ys) and "5" in xs and "1,024" in twos
    for got in ys + xs + twos:
        assert re.fullmatch(r"[0-9][0-9,.]*", got), got
    modules = sorted((ROOT / "pipeline" / "report").glob("*.py"))   # the page's code
    assert len(modules) > 10
    for module in modules:   # every log axis is log_scale's
        assert not re.findall(r"set_[xy]scale\(", module.read_text()), module.name


def test_the_page_never_replaces_a_file_beside_it(layout_copy):
    """The page was written as report.html.tmp and renamed: a file of the user's by that
    name was overwritten, then gone (exit 0)."""
    d = layout_copy
    mine = d / "report.html.tmp"
    mine.write_text("my notes\n")
    before = {p.name for p in d.iterdir()}
    make_report(d)
    assert mine.read_text() == "my notes\n"
    assert {p.name for p in d.iterdir()} == before | {"report.html"}   # no temporary left


def test_tokens_per_document_of_a_stale_pack_are_marked_in_the_tokenizer_section(
        full_run, tmp_path):
    """The tokenizer retrained with another vocabulary: section 4 showed the new
    vocabulary beside pack's tokens-per-document histogram, made with the old tokenizer,
    with no word that it is stale (section 4 'partial', only section 5 said so)."""
    d = tmp_path / "data"
    shutil.copytree(full_run[0], d, symlinks=True)
    run_script("train_tokenizer.py", "--input", d / "dedup", "--output", d / "tokenizer",
               "--vocab-size", "2100", "--workers", "2")
    html, _ = make_report(d)
    page = Page(html)
    assert page.stages["train_tokenizer"] == "ok" and page.stages["pack_parallel"] == "stale"
    assert page.sections["tokenizer"] == "stale"
    block = re.search(r'<section id="tokenizer".*?</section>', html, re.DOTALL).group(0)
    assert 'class="stale" data-step="pack_parallel"' in block
    assert "not of the tokenizer above" in Page(block).all_text
    toc = re.search(r'<nav class="toc">.*?</nav>', html, re.DOTALL).group(0)
    assert "4. Tokenizer</a> " + str(badge("stale")) in toc


def test_report_all_reach_of_each_rule_is_on_the_page(layout_copy):
    """clean.py --report-all counts what each rule would remove on its own (its table's
    'alone' columns, and a warning when that is over --warn-share); the page left both
    out."""
    d = layout_copy
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned", "--report-all",
               "--warn-share", "0.05", "--workers", "2")
    stats = json.loads((d / "cleaned" / "report" / "clean_stats.json").read_text())
    html, _ = make_report(d)
    table = re.search(r'<table class="rules">.*?</table>', html, re.DOTALL).group(0)
    rows = re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>")[1])
    assert "alone share" in table and len(rows) == len(stats["rules"])
    docs_in = stats["docs_in"]
    for r, row in zip(stats["rules"], rows):
        cells = [Page(c).all_text for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        assert cells[0] == r["rule"] and cells[2] == f"{r['removed']:,}"
        assert cells[5:7] == [f"{r['alone']:,}", f"{100 * r['alone'] / docs_in:.2f}%"], cells
        assert (cells[7] == "> 0.05") == r["alone_warn"] and (cells[4] == "> 0.05") == r["warn"]
    assert any(r["alone_warn"] and not r["warn"] for r in stats["rules"])


def test_removed_examples_cut_by_clean_are_said_to_be_cut(layout_copy):
    """clean.py saves the first 300 characters of each example: the page showed them as
    whole documents, and the sweep's as 240 characters '(+60 characters)', though the
    document (chars=517) had 277 more."""
    d = layout_copy
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned", "--workers", "2")
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned",
               "--sweep", "min_chars=200,600", "--workers", "2")
    saved = json.loads((d / "cleaned" / "manifest.json").read_text())["config"]["example_chars"]
    sweep = json.loads((d / "cleaned" / "report" / "sweep.json").read_text())
    exs = [e for s in sweep["sweeps"] for c in s["changes"] for e in c["examples"][:3]]
    cut = [e for e in exs if len(e["text"]) == saved and e["value"].get("chars", 0) > saved]
    assert cut
    html, _ = make_report(d)
    assert "characters)</span>" not in html.split("id=clean-sweep")[1].split("</section>")[0]
    mark = f"(the first {saved} characters: clean.py saves no more of a document)"
    text = Page(html).all_text
    for e in cut:
        assert e["text"] + " … " + mark in text, e["id"]
    removed = [json.loads(line) for line in
               (d / "cleaned" / "report" / "removed_char_repeat.jsonl").open()][:5]
    assert any(len(e["text"]) == saved for e in removed)
    for e in removed:
        assert (visible(e["text"]) + " … " + mark in text) == (len(e["text"]) == saved)
