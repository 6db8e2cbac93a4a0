"""Run results as a summary by function, CSV, JUnit XML and a self-contained HTML page."""

from __future__ import annotations

import csv
import html
import io
import math
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, fields
from pathlib import Path

from diopi.case_format import atomic_open
from diopi.conformance.run import OUTCOMES, CaseResult


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


_STYLE = """body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;font-size:13px}th{background:#eee}
.FAIL,.ERROR{color:#b00020;font-weight:bold}.PASS{color:#1b5e20}.SKIP,.NOT_IMPLEMENTED{color:#8a6d00}"""


def write_html(path: str | Path, results: list[CaseResult], title: str) -> None:
    """One page, no external resources: totals, the table by function, then every case that did not pass."""
    esc = html.escape
    count = totals(results)
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
             f"<style>{_STYLE}</style></head><body><h1>{esc(title)}</h1><p>"
             + ", ".join(f"<span class='{o}'>{o}: {count[o]}</span>" for o in OUTCOMES) + "</p>",
             "<h2>By function</h2><table><tr><th>function</th>"
             + "".join(f"<th>{o}</th>" for o in OUTCOMES) + "</tr>"]
    for function, counts in by_function(results).items():
        parts.append(f"<tr><td>{esc(function)}</td>"
                     + "".join(f"<td class='{o if counts[o] else ''}'>{counts[o]}</td>" for o in OUTCOMES) + "</tr>")
    parts.append("</table><h2>Cases that did not pass</h2><table><tr><th>case</th><th>op</th><th>dtype</th>"
                 "<th>layout</th><th>outcome</th><th>detail</th></tr>")
    for r in results:
        if r.outcome != "PASS":
            parts.append(f"<tr><td>{esc(r.case)}</td><td>{esc(r.op)}</td><td>{esc(r.dtype)}</td>"
                         f"<td>{esc(r.layout)}</td><td class='{r.outcome}'>{r.outcome}</td>"
                         f"<td>{esc(r.detail)}</td></tr>")
    parts.append("</table></body></html>")
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))


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
