"""The HTML report of a checking tool's run folder, and ``ditorch report DIR``.

:func:`write_report` turns ``<run>/results.jsonl`` (see :mod:`op_tools.results`) into one self-contained
``<run>/report.html``: verdict counts and the first FAIL, an error-against-op-order chart, a per-op summary and a
sortable, filterable table of every row (rendered by inline JavaScript, one page of rows at a time).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

from diopi.html_page import esc, table, verdict_cell, verdict_counts, write_page
from diopi.result_table import json_value
from op_tools.report_assets import CSS, JS
from op_tools.results import COLUMNS, VERDICTS, read_rows

__all__ = ["add_arguments", "find_results", "run", "write_report"]

REPORT_NAME = "report.html"
_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_json(value: Any) -> str:
    """JSON safe to place inside a ``<script>`` element (no ``</script``, ``<!--`` or line separators)."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:  # NaN or infinity somewhere: clean a copy (rare, so only then)
        text = json.dumps(json_value(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for char, escaped in _SCRIPT_UNSAFE.items():
        text = text.replace(char, escaped)
    return text


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        x = float(value)
    except ValueError:
        return None
    return None if math.isnan(x) else x


def _fmt(value: float | None) -> str:
    if value is None:
        return ""
    return ("inf" if value > 0 else "-inf") if math.isinf(value) else f"{value:.3g}"


def case_href(case_dir: Any) -> str | None:
    """A relative link to a saved case folder, or None (empty, absolute URL or other scheme)."""
    if not isinstance(case_dir, str) or not case_dir or case_dir.startswith("//") or "\\" in case_dir:
        return None
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", case_dir):
        return None
    return quote(case_dir, safe="/") + ("" if case_dir.endswith("/") else "/")


def op_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per op name: checks, verdict counts, worst ``max_rel_diff``; failing ops first."""
    ops: dict[str, dict[str, Any]] = {}
    for row in rows:
        name = str(row.get("name") or "")
        op = ops.setdefault(name, {"name": name, "checks": 0, "counts": Counter(), "worst": None})
        op["checks"] += 1
        op["counts"][row.get("verdict")] += 1
        rel = _number(row.get("max_rel_diff"))
        if rel is not None and (op["worst"] is None or rel > op["worst"]):
            op["worst"] = rel
    return sorted(ops.values(), key=lambda o: (-o["counts"]["FAIL"], -o["counts"]["NOISE"],
                                               -(o["worst"] if o["worst"] is not None else -1.0), o["name"]))


def _names(run_dir: Path) -> tuple[str, str, str]:
    """(tool, run, rank) from ``<results>/<tool>/<run>/rank<r>``."""
    if run_dir.name.startswith("rank"):
        return run_dir.parent.parent.name, run_dir.parent.name, run_dir.name
    return run_dir.parent.name, run_dir.name, ""


def _header(rows: list[dict[str, Any]], title: str, run_dir: Path) -> str:
    tool, run_name, rank = _names(run_dir)
    meta = (f"{esc(tool)} &middot; run {esc(run_name)}{' &middot; ' + esc(rank) if rank else ''} &middot; "
            f"{len(rows)} rows &middot; written {esc(time.strftime('%Y-%m-%d %H:%M:%S'))} from "
            f"<code>{esc(run_dir / 'results.jsonl')}</code>")
    first = next((i for i, row in enumerate(rows) if row.get("verdict") == "FAIL"), None)
    if first is None:
        box = '<p class="all-good">No FAIL rows.</p>'
    else:
        row = rows[first]
        href = case_href(row.get("case_dir"))
        items = [("op", row.get("name")), ("call id", row.get("id")), ("phase", row.get("phase")),
                 ("tensor", row.get("index")), ("max_rel_diff", _fmt(_number(row.get("max_rel_diff")))),
                 ("max_abs_diff", _fmt(_number(row.get("max_abs_diff")))), ("message", row.get("message")),
                 ("call site", row.get("call_site"))]
        dl = "".join(f"<dt>{k}</dt><dd>{esc(v)}</dd>" for k, v in items if v not in (None, ""))
        if href:
            dl += f'<dt>saved case</dt><dd><a href="{esc(href)}">{esc(row.get("case_dir"))}</a></dd>'
        box = (f'<div class="first-fail" id="first-fail"><b>First FAIL (in op order): '
               f'<span class="mono">{esc(row.get("name"))}</span> #{esc(row.get("id"))}</b> '
               f'<button type="button" data-jump="{first}">show in table</button><dl>{dl}</dl></div>')
    return (f"<header><h1>{esc(title)}</h1><p class=\"meta\">{meta}</p>"
            f"{verdict_counts(Counter(row.get('verdict') for row in rows), VERDICTS)}{box}</header>")


def _ops_table(rows: list[dict[str, Any]]) -> str:
    body = []
    for op in op_summary(rows):
        c = op["counts"]
        cells = "".join(verdict_cell(v, c[v], "num") if v == "FAIL" and c[v] else f'<td class="num">{c[v]}</td>'
                        for v in VERDICTS)
        body.append(f'<tr data-op="{esc(op["name"])}"><td>{esc(op["name"])}</td><td class="num">{op["checks"]}'
                    f'</td>{cells}<td class="num">{_fmt(op["worst"])}</td></tr>')
    return table(("op", "checks", *VERDICTS, "worst max_rel_diff"), body, ' id="ops"')


def _body(rows: list[dict[str, Any]], title: str, run_dir: Path) -> str:
    """The report page's body for ``rows`` (the page script, :data:`~op_tools.report_assets.JS`, reads its data)."""
    verdict_options = "".join(f'<option value="{v}">{v}</option>' for v in VERDICTS)
    return f"""{_header(rows, title, run_dir)}
<section><h2>Error against op order</h2>
<div class="controls"><label>y <select id="metric"><option value="max_rel_diff">max_rel_diff</option>
<option value="max_abs_diff">max_abs_diff</option></select></label><span class="legend" id="legend"></span></div>
<div class="chart-box"><canvas id="chart"></canvas><div id="tip" hidden></div></div>
<noscript><p>The chart and the rows table need JavaScript.</p></noscript></section>
<section><h2>Ops (click one to filter the rows)</h2>{_ops_table(rows)}</section>
<section id="rows-section"><h2>Rows</h2><div class="controls">
<input type="search" id="filter" placeholder="filter: op, id, tensor, message, call site" aria-label="filter">
<select id="verdict" aria-label="verdict"><option value="">all verdicts</option>
<option value="!PASS">not PASS</option>{verdict_options}</select>
<select id="phase" aria-label="phase"><option value="">all phases</option><option value="forward">forward</option>
<option value="backward">backward</option></select>
<select id="op" aria-label="op"><option value="">all ops</option></select>
<button type="button" id="reset">reset</button>
<button type="button" id="prev">&larr; prev</button><span id="page-no"></span>
<button type="button" id="next">next &rarr;</button><span id="page-info"></span></div>
<div class="table-wrap"><table id="rows"><thead></thead><tbody></tbody></table></div></section>
<script type="application/json" id="columns-data">{script_json(list(COLUMNS))}</script>
<script type="application/json" id="rows-data">{script_json(rows)}</script>"""


def write_report(run_dir: Path, title: str | None = None) -> Path:
    """Write ``run_dir/report.html`` from ``run_dir/results.jsonl``; the report's path.

    Raises ValueError naming the file and line of a row that is not a JSON object, OSError when a file
    cannot be read or written.
    """
    run_dir = Path(run_dir)
    source = run_dir / "results.jsonl"
    rows = read_rows(source)
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise ValueError(f"{source}: row {number}: not a JSON object")
    if title is None:
        title = " / ".join(part for part in _names(run_dir) if part)
    return write_page(run_dir / REPORT_NAME, title, _body(rows, title, run_dir), CSS, JS)


def find_results(root: Path) -> list[Path]:
    """Every ``results.jsonl`` under ``root`` (or ``root`` itself when it is one), sorted."""
    if root.is_file():
        return [root] if root.name == "results.jsonl" else []
    return sorted(root.rglob("results.jsonl"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``ditorch report``."""
    parser.add_argument("path", metavar="DIR",
                        help="a run folder with results.jsonl, or a folder searched recursively for them")
    parser.add_argument("--title", default=None, help="page title (default: <tool> / <run> / <rank>)")


def run(args: argparse.Namespace) -> int:
    """Rebuild ``report.html`` next to every ``results.jsonl`` under ``args.path``; the exit status."""
    root = Path(args.path)
    prog = getattr(args, "prog_name", None) or "report"
    if not root.exists():
        print(f"{prog}: error: {root}: no such file or directory", file=sys.stderr)
        return 2
    sources = find_results(root)
    if not sources:
        print(f"{prog}: error: no results.jsonl under {root} (expected a run folder of a checking tool, e.g. "
              f"op_tools_results/op_autocompare/<run>)", file=sys.stderr)
        return 2
    status = 0
    for source in sources:
        try:
            print(write_report(source.parent, args.title), flush=True)
        except (OSError, ValueError) as exc:
            print(f"{prog}: error: {exc}", file=sys.stderr)
            status = 2
    return status
