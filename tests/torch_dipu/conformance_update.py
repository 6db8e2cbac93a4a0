"""Regenerate a conformance suite's expectations and the generated section of its docs page.

Shared by ``update_opinfo_expectations.py`` and ``update_moduleinfo_expectations.py``: :func:`main` runs
every entry of a :class:`conformance_common.Suite` in every mode, writes the expected-failures file
(name -> {mode: reason}) and the skips file, and rewrites the section of the suite's page between the
generated-section markers. ``--check`` only prints the differences to the checked-in list; naming entries
runs only those and updates only their entries (the page is left alone).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

from conformance_common import Outcome, Suite, load_json, summarize

END = "<!-- END GENERATED -->"


def begin_marker(suite: Suite) -> str:
    return f"<!-- BEGIN GENERATED: {suite.script} -->"


def _run_one(suite: Suite, name: str) -> tuple[str, dict[str, Outcome]]:
    return name, {mode: suite.run(name, mode) for mode in suite.modes}


def run_all(suite: Suite, names: list[str], jobs: int) -> dict[str, dict[str, Outcome]]:
    """Every mode of every named entry, in ``jobs`` processes; results in the order of ``names``."""
    results: dict[str, dict[str, Outcome]] = {}
    if jobs <= 1:
        for name in names:
            results[name] = _run_one(suite, name)[1]
    else:
        with ProcessPoolExecutor(jobs) as pool:
            for name, res in pool.map(functools.partial(_run_one, suite), names, chunksize=4):
                results[name] = res
    return {name: results[name] for name in names}


def _reason_kind(reason: str) -> str:
    """A failure reason without sample index and numbers, for grouping."""
    text = reason.split(": ", 1)[1] if reason.startswith("sample ") else reason
    return text[:90]


def _rate(c: dict[str, int]) -> float:
    return 100.0 * c["pass"] / c["total"] if c["total"] else 100.0


def render_doc(suite: Suite, results: dict[str, dict[str, Outcome]], seconds: float, summary: str) -> str:
    """The generated section: counts per mode, failures with reasons, skips grouped and listed."""
    counts = summarize(results, suite.modes)
    noun = suite.noun
    lines = [begin_marker(suite), "", f"{summary}: **{len(results)}**. Full run: {seconds:.0f} s.", ""]
    lines += ["| mode | pass | fail | skip | pass rate (pass / (pass + fail)) |", "|---|---|---|---|---|"]
    for mode in suite.modes:
        c = counts[mode]
        lines.append(f"| {mode} | {c['pass']} | {c['fail']} | {c['skip']} | {_rate(c):.1f}% |")
    for status, title in (("fail", "Failures"), ("skip", "Skips")):
        lines += ["", f"### {title}", ""]
        rows = [(n, m, r[m].reason) for n, r in results.items() for m in suite.modes if r[m].status == status]
        if status == "skip" and rows:
            kinds = Counter((m, _reason_kind(reason)) for _, m, reason in rows)
            lines += ["Grouped by reason:", "", f"| mode | reason | {noun}s |", "|---|---|---|"]
            for (mode, kind), n in kinds.most_common():
                lines.append(f"| {mode} | {kind.replace('|', '/')} | {n} |")
            lines += [""]
        if not rows:
            lines.append("None.")
            continue
        lines += [f"| {noun} | mode | reason |", "|---|---|---|"]
        lines += [f"| `{n}` | {m} | {reason.replace('|', '/')} |" for n, m, reason in rows]
    lines += ["", END]
    return "\n".join(lines)


def write_doc(suite: Suite, section: str) -> None:
    """Replace the generated section of the suite's page (create the page when missing)."""
    begin = begin_marker(suite)
    text = suite.doc.read_text() if suite.doc.exists() else f"# {suite.title} conformance\n\n{begin}\n{END}\n"
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(END)
    suite.doc.write_text(head + section + tail)


def main(suite: Suite, doc: str, summary: str) -> int:
    """The command line of an update script (``doc``: its help text; ``summary``: the page's count line)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--check", action="store_true", help="report differences, write nothing")
    parser.add_argument("names", nargs="*", metavar=suite.noun.upper(),
                        help=f"only these {suite.noun}s (full {suite.title} names)")
    opts = parser.parse_args()

    entries = suite.entries()
    all_names = list(entries)
    names = opts.names or all_names
    unknown = [n for n in names if n not in entries]
    if unknown:
        parser.error(f"unknown {suite.noun}s: {', '.join(unknown)}")
    start = time.perf_counter()
    results = run_all(suite, names, opts.jobs)
    seconds = time.perf_counter() - start

    old = load_json(suite.expectations)
    new = {k: v for k, v in old.items() if k not in names and k in entries}
    skips = load_json(suite.skips) if opts.names else {}
    skips = {k: v for k, v in skips.items() if k not in names}
    for name, res in results.items():
        fails = {m: o.reason for m, o in res.items() if o.status == "fail"}
        if fails:
            new[name] = fails
        sk = {m: o.reason for m, o in res.items() if o.status == "skip"}
        if sk:
            skips[name] = sk
    for name in names:
        before, after = set(old.get(name, {})), set(new.get(name, {}))
        for mode in sorted(before - after):
            print(f"now passes or skips: {name} {mode}")
        for mode in sorted(after - before):
            print(f"now fails: {name} {mode}: {new[name][mode]}")
    counts = summarize(results, suite.modes)
    for mode in suite.modes:
        c = counts[mode]
        print(f"{mode}: pass {c['pass']} fail {c['fail']} skip {c['skip']} ({_rate(c):.1f}%)")
    print(f"{len(names)} {suite.noun}s in {seconds:.0f} s")
    if opts.check:
        return 0
    order = {n: i for i, n in enumerate(all_names)}
    for path, table in ((suite.expectations, new), (suite.skips, skips)):
        path.write_text(json.dumps(dict(sorted(table.items(), key=lambda kv: order[kv[0]])), indent=1) + "\n")
    if not opts.names:
        write_doc(suite, render_doc(suite, results, seconds, summary))
    return 0
