"""clean.py --sweep's tables: several values of one threshold judged on the same documents.

plan_sweep turns `--sweep NAME=V1,V2,...` into the recipes to judge (the run's own first)
and, for each value, the recipe behind it; sweep_pairs names the neighbouring values whose
documents that change fate the tasks collect; sweep_report and sweep_markdown make the
printed tables and report/sweep.{json,md} from the tasks' tallies (pipeline.clean_report.merge);
sweep_run is clean.py's --sweep, from the flags to the printed tables.
"""

from __future__ import annotations

import sys

from algorithms.cleaning import Recipe
from pipeline import clean_task, kept_store
from pipeline.clean_flags import decont_n_recipe, lid_path, parse_clean_sweep, recipe_of
from pipeline.clean_report import example_texts, merge, signals_summary
from pipeline.clean_signals import signal_deps, signal_sources
from pipeline.stage import Run
from pipeline.sweep import SweepRun
from pipeline.units import describe
from pipeline.tables import markdown_table, pct, snippet, table


def plan_sweep(base: Recipe, sweeps: list[tuple[str, list]],
               decont_n=None) -> tuple[list[Recipe], list]:
    """The recipes to judge (the given one first) and, per swept parameter, the index of
    the recipe behind each value. decont_n(n): the recipe of decont_n's value n."""
    configs = [base]
    # the same recipe is the same thresholds, languages and packs (the rules are the
    # packs'): recipes are told apart by those, never hashed whole (a rule of a file may
    # hold a list, an array or an unhashable measure)
    index = {(base.values, base.languages, base.packs): 0}
    plan = []
    by_key = {r.key: r for r in base.rules}
    for name, values in sweeps:
        idx = []
        key, _, lang = name.partition("@")
        for v in values:
            if key == "languages":
                rec = Recipe(base.rules, base.values, v, base.lid_chars, base.packs)
            elif key == "decont_n":
                rec = decont_n(v)
            elif lang:   # one language's threshold; the others as given
                now = base.threshold(by_key[key])
                per = dict(now) if isinstance(now, dict) else {"*": now}
                rec = base.with_threshold(by_key[key], {**per, lang: v})
            else:
                rec = base.with_threshold(by_key[key], v)
            same = (rec.values, rec.languages, rec.packs)
            if same not in index:
                index[same] = len(configs)
                configs.append(rec)
            idx.append(index[same])
        plan.append({"param": name, "values": values, "configs": idx})
    return configs, plan


def sweep_pairs(plan: list[dict]) -> list[list[int]]:
    return sorted({(p["configs"][j], p["configs"][j + 1]) for p in plan
                   for j in range(len(p["configs"]) - 1)})


def value_text(v) -> str:
    return ",".join(v) if isinstance(v, tuple) else f"{v:g}" if isinstance(v, float) else str(v)


def sweep_report(plan: list[dict], configs: list[Recipe], results: list[dict],
                 pairs: list[list[int]], examples: int) -> tuple[str, dict]:
    """The printed text and the JSON of a sweep: per parameter, the removal table for each
    value, and for neighbouring values the documents whose fate changes."""
    names = [r.name for r in configs[0].rules]
    tots = [merge(results, c, i, examples) for i, c in enumerate(configs)]
    n = tots[0]["docs_in"]
    lines, data = [], {"docs_in": n, "sweeps": []}
    pair_index = {tuple(p): k for k, p in enumerate(pairs)}
    for p in plan:
        name = p["param"]
        shown, others = shown_rules(names, [tots[ci] for ci in p["configs"]])
        head = [name] + shown + (["other rules"] if others else []) + ["kept", "kept share"]
        body = []
        entry = {"param": name, "values": [], "changes": []}
        for v, ci in zip(p["values"], p["configs"]):
            t = tots[ci]
            body.append([value_text(v)] + [t["removed"][r] for r in shown]
                        + ([sum(t["removed"][r] for r in others)] if others else [])
                        + [t["docs_out"], pct(t["docs_out"], n)])
            entry["values"].append({"value": list(v) if isinstance(v, tuple) else v,
                                    "removed": t["removed"], "docs_out": t["docs_out"],
                                    "bytes_out": t["bytes_out"]})
        lines += [f"sweep {name} (other thresholds as given; {n:,} documents)",
                  table(head, body, right=set(range(1, len(head)))), ""]
        for j in range(len(p["values"]) - 1):
            a, b = p["configs"][j], p["configs"][j + 1]
            if a == b:
                continue
            k = pair_index[(a, b)]
            count = sum(r["fate"][k]["count"] for r in results)
            ex = [e for r in results for e in r["fate"][k]["examples"]][:examples]
            va, vb = value_text(p["values"][j]), value_text(p["values"][j + 1])
            change = {"from": va, "to": vb, "documents": count, "examples": []}
            lines.append(f"{name} {va} -> {vb}: {count:,} documents change fate")
            for e in ex:
                by = va if e["removed_by"] == a else vb
                keeps = vb if by == va else va
                change["examples"].append({**e, "removed_by": by, "kept_by": keeps})
            for e in change["examples"][:5]:
                val = ", ".join(f"{k2}={v2}" for k2, v2 in e["value"].items())
                lines.append(f"  removed at {e['removed_by']}, kept at {e['kept_by']}: "
                             f"{e['id']} ({e['rule']}: {val}) {snippet(e['text'], 80)!r}")
            entry["changes"].append(change)
            lines.append("")
        data["sweeps"].append(entry)
    return "\n".join(lines).rstrip(), data


def shown_rules(names: list[str], tots: list[dict], most: int = 6) -> tuple[list[str], list[str]]:
    """The rules a sweep's table shows one column each, and the rest it sums in one
    column: with more than `most` rules (packs), only those whose removals change."""
    if len(names) <= most:
        return names, []
    moving = [r for r in names if len({t["removed"][r] for t in tots}) > 1]
    return moving, [r for r in names if r not in moving]


def sweep_markdown(data: dict, names: list[str]) -> str:
    md = ["# clean.py --sweep", "", f"{data['docs_in']:,} documents in; each table varies one "
          "threshold, the others as given.", ""]
    for s in data["sweeps"]:
        shown, others = shown_rules(names, s["values"])
        md += [f"## {s['param']}", "", markdown_table(
            [s["param"]] + shown + (["other rules"] if others else []) + ["kept"],
            [[value_text(tuple(v["value"]) if isinstance(v["value"], list) else v["value"])]
             + [v["removed"][r] for r in shown]
             + ([sum(v["removed"][r] for r in others)] if others else [])
             + [v["docs_out"]] for v in s["values"]]), ""]
        for c in s["changes"]:
            md += [f"### {s['param']} {c['from']} -> {c['to']}: {c['documents']:,} documents "
                   "change fate", ""]
            if c["examples"]:
                md += [markdown_table(["id", "removed at", "rule", "value", "text"],
                                      [[e["id"], e["removed_by"], e["rule"],
                                        ", ".join(f"{k}={v}" for k, v in e["value"].items()),
                                        snippet(e["text"], 120)] for e in c["examples"]]), ""]
    return "\n".join(md)


def sweep_run(run: Run, task) -> int:
    """--sweep: judge every swept value on the same documents, print and save the tables.

    Writes nothing the next stage reads: not the output, not its manifest. The signals
    it measured go to a hidden store beside the output, where the next run finds them.
    task: clean.py's task function, which judges every recipe on one unit.
    """
    args, base = run.args, recipe_of(run.args)
    sweeps = [parse_clean_sweep(s, base) for s in args.sweep]
    configs, plan = plan_sweep(base, sweeps, lambda n: decont_n_recipe(args, base, n))
    pairs = [list(p) for p in sweep_pairs(plan)]
    sw = SweepRun(run, "signals")
    shown = len({i for p in plan for i in p["configs"]})   # the rows of the tables
    print(f"sweep: {shown} threshold set{'s' if shown != 1 else ''} on {describe(run.units)}",
          file=sys.stderr)
    sources = signal_sources(run, base)
    signals_dir = sw.kept / "signals"
    sw.parallel("sweep", task, units=run.unit_dicts(), staging=str(sw.staging),
                job=clean_task.job(configs, None, str(lid_path(args)), args.engine,
                                   examples=args.examples, sources=sources,
                                   signals_dir=str(signals_dir), pairs=pairs))
    results = sw.results("clean")
    kept = kept_store.write_index(signals_dir, signal_deps(run, base),
                                  [r["signals"] for r in results])
    example_texts(results, run.units, base, args.examples)
    text, data = sweep_report(plan, configs, results, pairs, args.examples)
    signals = signals_summary(results, kept)
    data.update(seconds=sw.seconds, signals={k: v for k, v in signals.items() if k != "notes"},
                base=base.config())
    # anything new (a task with no kept signals, a signal it lacked, a language-ID call)
    # is kept beside the output for the next run
    measured = bool(signals["lid_calls_made"]) or any(
        not r["signals_reused"] or r["signals_measured"] for r in results)
    wrote = sw.finish(data, sweep_markdown(data, [r.name for r in base.rules]), measured)
    print(text)
    print(f"language ID calls made {signals['lid_calls_made']:,}, reused "
          f"{signals['lid_calls_reused']:,}; {data['seconds']:.1f} s")
    print(wrote)
    return 0
