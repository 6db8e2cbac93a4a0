"""Run results as a summary by function, CSV, JUnit XML and a self-contained HTML page."""

from __future__ import annotations

import csv
import io
import math
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, fields
from pathlib import Path

from diopi.case_format import atomic_open
from diopi.conformance.run import OUTCOMES, CaseResult
from diopi.html_page import esc, table, verdict_cell, verdict_counts, write_page


def by_function(results: Iterable[CaseResult]) -> dict[str, Counter[str]]:
    """Outcome counts per function, in the order functions first appear."""
    table: dict[str, Counter[str]] = {}
    for r in results:
        table.setdefault(r.function, Counter())[r.outcome] += 1
    return table


def totals(results: Iterable[CaseResult]) -> Counter[str]:
    return Counter(r.outcome for r in results)


def write_csv(path: str | Path, results: list[CaseResult]) -> None:
    """One row per case: every :class:`CaseResult` field."""
    names = [f.name for f in fields(CaseResult)]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=names)
    writer.writeheader()
    for r in results:
        writer.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(r).items()})
    with atomic_open(path, "w", encoding="utf-8", newline="") as f:
        f.write(buffer.getvalue())


def write_junit(path: str | Path, results: list[CaseResult], name: str = "diopi.conformance") -> None:
    """JUnit XML: one ``testcase`` per case (``classname`` the DIOPI function, ``name`` the case id); FAIL and
    ERROR have a ``failure`` / ``error`` element, SKIP and NOT_IMPLEMENTED a ``skipped`` element."""
    count = totals(results)
    suite = ET.Element("testsuite", name=name, tests=str(len(results)), failures=str(count["FAIL"]),
                       errors=str(count["ERROR"]), skipped=str(count["SKIP"] + count["NOT_IMPLEMENTED"]))
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=r.function, name=r.case)
        if r.outcome == "FAIL":
            ET.SubElement(case, "failure", message=r.detail[:500]).text = r.detail
        elif r.outcome == "ERROR":
            ET.SubElement(case, "error", message=r.detail[:500]).text = r.detail
        elif r.outcome in ("SKIP", "NOT_IMPLEMENTED"):
            ET.SubElement(case, "skipped", message=f"{r.outcome}: {r.detail}"[:500])
    tree = ET.ElementTree(ET.Element("testsuites"))
    tree.getroot().append(suite)
    ET.indent(tree)
    with atomic_open(path, "wb") as f:
        tree.write(f, encoding="utf-8", xml_declaration=True)


def write_html(path: str | Path, results: list[CaseResult], title: str) -> None:
    """One page, no external resources: totals, the table by function, then every case that did not pass."""
    functions = [f"<tr><td>{esc(function)}</td>"
                 + "".join(verdict_cell(o, c[o], "num") if c[o] else '<td class="num">0</td>' for o in OUTCOMES)
                 + "</tr>" for function, c in by_function(results).items()]
    cases = [f'<tr class="v-{r.outcome}"><td>{esc(r.case)}</td><td>{esc(r.op)}</td><td>{esc(r.dtype)}</td>'
             f"<td>{esc(r.layout)}</td>{verdict_cell(r.outcome)}<td>{esc(r.detail)}</td></tr>"
             for r in results if r.outcome != "PASS"]
    write_page(path, title, f"<h1>{esc(title)}</h1>{verdict_counts(totals(results), OUTCOMES)}<h2>By function</h2>"
               f"{table(('function', *OUTCOMES), functions)}<h2>Cases that did not pass</h2>"
               f"{table(('case', 'op', 'dtype', 'layout', 'outcome', 'detail'), cases)}")


def summary_lines(results: list[CaseResult], verbose: bool = False) -> list[str]:
    """The console summary: one line per function that has anything but PASS (every function when
    ``verbose``), then the totals."""
    lines = []
    for function, counts in by_function(results).items():
        if verbose or set(counts) - {"PASS"}:
            lines.append(f"{function:<36} " + "  ".join(f"{o} {counts[o]}" for o in OUTCOMES if counts[o]))
    count = totals(results)
    lines.append(f"{len(results)} cases: " + ", ".join(f"{o} {count[o]}" for o in OUTCOMES))
    return lines
