"""The one HTML writer: every page a tool writes (op_tools' report and timing page, compare-runs, the conformance
run) is assembled here, self-contained, with one stylesheet and one escaping function. A verdict class (``v-PASS``,
``v-NOISE``, ``v-SKIP``, ``v-FAIL``, ...) sets the colour ``--v`` of ``.verdict`` text, ``.count`` chips and rows."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from diopi.case_format import atomic_open

__all__ = ["CSS", "esc", "table", "verdict_cell", "verdict_counts", "write_page"]

CSS = """
:root { --pass: #2e7d32; --noise: #d98c1c; --skip: #808080; --fail: #c62828; --line: #d8d8d8; }
* { box-sizing: border-box; } button { cursor: pointer; }
body { margin: 0 auto; max-width: 1600px; padding: 12px 20px 40px; color: #1d1d1f; background: #fff;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; }
h1 { font-size: 22px; margin: 8px 0 2px; word-break: break-all; }
h2 { font-size: 17px; margin: 26px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
code, td, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
.meta { color: #555; margin: 0 0 10px; word-break: break-all; }
.table-wrap { overflow-x: auto; border: 1px solid var(--line); border-radius: 4px; margin: 4px 0 12px; }
table { border-collapse: collapse; width: 100%; }
th, td { padding: 3px 8px; border-bottom: 1px solid #eee; text-align: left; vertical-align: top; }
th { position: sticky; top: 0; background: #f6f6f6; white-space: nowrap; }
td.num { text-align: right; white-space: nowrap; }
.v-PASS { --v: var(--pass); } .v-NOISE, .v-PASS_NOISE { --v: var(--noise); }
.v-SKIP, .v-NOT_IMPLEMENTED, .v-none { --v: var(--skip); } .v-FAIL, .v-ERROR { --v: var(--fail); }
.verdict { color: var(--v); font-weight: 600; } tr.v-SKIP td { color: #666; }
tr.v-FAIL td, tr.v-ERROR td { background: #fdecea; } tr.v-NOISE td, tr.v-PASS_NOISE td { background: #fff6e5; }
.counts { display: flex; flex-wrap: wrap; gap: 8px; margin: 8px 0; }
.count { border-radius: 6px; padding: 4px 12px; background: #f1f1f1; border-left: 5px solid var(--v, var(--skip)); }
.count b { font-size: 18px; margin-right: 4px; } .count.some.v-FAIL, .count.some.v-ERROR { background: #fdecea; }
"""


def esc(value: Any) -> str:
    """``value`` as HTML text, also safe inside a quoted attribute (None is empty)."""
    return html.escape("" if value is None else str(value), quote=True)


def table(header: Iterable[str], rows: Iterable[str], attrs: str = "") -> str:
    """A scrollable table: one row of ``header`` names (escaped) over ``rows`` (``<tr>`` markup); ``attrs``
    (markup, e.g. ``' id="ops"'``) go on the ``<table>`` element."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    return (f'<div class="table-wrap"><table{attrs}><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
            "</table></div>")


def verdict_cell(verdict: str, text: Any = None, cls: str = "") -> str:
    """A ``<td>`` in ``verdict``'s colour showing ``text`` (default: the verdict); ``cls`` adds classes."""
    cls = f"verdict v-{esc(verdict)} {cls}".rstrip()
    return f'<td class="{cls}">{esc(verdict if text is None else text)}</td>'


def verdict_counts(count: Mapping[Any, int], verdicts: Sequence[str]) -> str:
    """A chip with the count of each of ``verdicts``, then of any other key of ``count``, tinted by verdict."""
    keys = [*verdicts, *sorted((k for k in count if k not in verdicts), key=str)]
    chips = "".join(f'<span class="count v-{esc(k)}{" some" if count.get(k) else ""}" data-verdict="{esc(str(k))}" '
                    f'data-count="{count.get(k, 0)}"><b>{count.get(k, 0)}</b>{esc(str(k))}</span>' for k in keys)
    return f'<div class="counts">{chips}</div>'


def write_page(path: str | Path, title: str, body_html: str, extra_css: str = "", scripts: str = "") -> Path:
    """Write one self-contained page to ``path`` in one step (``atomic_open``); ``path``. ``title`` is text,
    ``body_html`` markup (values escaped with :func:`esc`), ``extra_css`` rules after :data:`CSS`, ``scripts`` JS."""
    if "</script" in scripts.lower():
        raise ValueError("write_page: scripts must not contain '</script'")
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
                f'content="width=device-width, initial-scale=1">\n<title>{esc(title)}</title><style>{CSS}{extra_css}'
                f"</style></head><body>\n{body_html}{f'<script>{scripts}</script>' if scripts else ''}</body></html>\n")
    return Path(path)
