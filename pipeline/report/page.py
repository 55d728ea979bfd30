"""The page around its sections: a section and its status badge, the boxes that name a
step missing or stale and the command to run, a section that cannot be drawn (one error
line in place of that section, not the page), and the document with its style sheet
(page.css) under a Content-Security-Policy that forbids fetching anything.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pipeline.manifest import display_path
from pipeline.report.html import Html, badge, esc
from pipeline.report.state import Run, State, Step

PAGE_TITLE = "Data pipeline report:"   # in every page's <title>
CSS = (resources.files(__package__) / "page.css").read_text(encoding="utf-8")


def section_status(states: list[State]) -> str:
    if all(not s.ran for s in states):
        return "missing"
    if any(s.state in ("stale", "unreadable") for s in states):
        return "stale"
    if any(not s.ran for s in states):
        return "partial"
    return "ok"


def banners(run: Run, states: list[State], compact: bool = False) -> Html:
    """A box per step that is missing, stale or unreadable, naming what to run; compact:
    one box for all the missing steps and one for all the stale ones."""
    missing = [s for s in states if s.state == "missing"]
    stale = [s for s in states if s.state in ("stale", "unreadable")]
    out = []
    if compact:
        if missing:
            out.append(f'<div class="missing" data-step="{missing[0].step.key}">Not run yet: '
                       f'{esc(", ".join(s.step.label for s in missing))}. Next: '
                       f'<code>{esc(missing[0].step.command(run.data))}</code></div>')
        if stale:
            out.append(f'<div class="stale" data-step="{stale[0].step.key}"><b>Stale: '
                       f'{esc(", ".join(s.step.label for s in stale))}</b>. '
                       f'{esc(stale[0].message)}. What is shown is what is on disk.</div>')
        return Html("".join(out))
    for s in missing:
        out.append(f'<div class="missing" data-step="{s.step.key}"><b>{esc(s.step.label)}'
                   f'</b> has not run yet, so this part is empty. Run: '
                   f'<code>{esc(s.step.command(run.data))}</code></div>')
    for s in stale:
        out.append(f'<div class="stale" data-step="{s.step.key}"><b>{esc(s.step.label)} '
                   f'is {s.state}</b>: {esc(s.message)}. What is shown below is what is on '
                   f'disk, not what the current inputs would give.</div>')
    return Html("".join(out))


def missing_part(run: Run, what: str, step: Step, extra: str = "",
                 path: str | None = None) -> Html:
    """A part of the page that cannot be drawn: `what` (a file under the data folder, or
    a description with the file it comes from in `path`) is unreadable or missing."""
    gone = "is unreadable" if (run.data / (path or what)).exists() else f"is missing{extra}"
    return Html(f'<div class="missing" data-step="{step.key}">{esc(what)} {gone}. '
                f'Run: <code>{esc(step.command(run.data))}</code></div>')


def section(sid: str, title: str, status: str, body: str, show_status: bool = True) -> Html:
    return Html(f'<section id="{sid}" data-status="{status}"><h2>{esc(title)} '
                f'{badge(status) if show_status else ""}</h2>{body}</section>')


def subsection(title: str, body: str, sid: str | None = None) -> Html:
    return Html(f'<h3{f" id={sid}" if sid else ""}>{esc(title)}</h3>{body}')


def build_section(run: Run, sid: str, title: str, fn) -> Html:
    """One section; a report file in an unexpected shape spoils that section, not the page."""
    try:
        return fn(run)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, ArithmeticError) as e:
        msg = f"{title}: could not be drawn ({type(e).__name__}: {e})"
        run.errors.append(msg)
        return section(sid, title, "error", Html(f'<div class="stale error">{esc(msg)}; '
                                                 f'rerun the stage that writes it.</div>'))


def document(data: Path, body: str) -> str:
    """The page: one file, inline CSS, no script, nothing fetched."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "img-src data:; style-src 'unsafe-inline'\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{PAGE_TITLE} {esc(display_path(data))}</title>"
            f"<style>\n{CSS}</style></head><body><main>" + body + "</main></body></html>\n")
