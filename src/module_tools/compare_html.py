"""The self-contained HTML page of a :class:`~module_tools.compare.RunComparison`: the module tree coloured by
each subtree's worst verdict, expandable, with every tensor's verdict, errors and statistics (no network)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diopi.compare import Verdict, worst_verdict
from diopi.html_page import esc, table, verdict_cell, write_page

if TYPE_CHECKING:
    from .compare import EntryComparison, RunComparison

__all__ = ["write_comparison_page"]

_CSS = "details{margin-left:1.2em}summary{cursor:pointer;color:var(--v)}"
_HEADER = ("tensor", "verdict", "max abs", "max rel", "cosine", "dtype shape", "stats test/ref", "message")


def _fmt(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, float) else esc(x)


def _entry_table(entry: EntryComparison, stats: tuple[str, ...]) -> str:
    rows = []
    for name, r in entry.tensors.items():
        t, e = entry.test_stats.get(name) or {}, entry.ref_stats.get(name) or {}
        values = " ".join(f"{k} {_fmt(t.get(k))}/{_fmt(e.get(k))}" for k in stats)
        v = r.verdict
        rows.append(f'<tr class="v-{v.name}"><td>{esc(name)}</td>{verdict_cell(v.name, v.value)}'
                    f'<td class="num">{_fmt(r.max_abs_error)}</td><td class="num">{_fmt(r.max_rel_error)}</td>'
                    f'<td class="num">{_fmt(r.cosine_similarity)}</td><td>{_fmt(t.get("dtype"))} '
                    f"{_fmt(t.get('shape'))}</td><td>{values}</td><td>{esc(r.message)}</td></tr>")
    direction = entry.direction.replace("fixed_", "fixed-input ")
    return (f"<div>step {entry.step} call {entry.call} {direction} (aligned: {entry.alignment}, reference "
            f"{esc(entry.ref_module or '<root>')})</div>{table(_HEADER, rows)}")


def write_comparison_page(path: str | Path, result: RunComparison, stats: tuple[str, ...]) -> Path:
    """Write the page of ``result`` to ``path``: the module tree coloured by each subtree's worst verdict,
    expandable, with every tensor's verdict, errors and ``stats`` (the statistics compared, test/reference)."""
    by_module: dict[str, list[EntryComparison]] = {}
    for entry in result.forward + result.backward + result.fixed_input:
        by_module.setdefault(entry.module, []).append(entry)
    paths = list(result.modules) or list(by_module)
    children: dict[str, list[str]] = {p: [] for p in paths}
    for p in paths:
        if p:
            parent = p.rsplit(".", 1)[0] if "." in p else ""
            children.setdefault(parent, []).append(p)

    def worst(p: str) -> Verdict | None:
        own = [e.verdict for e in by_module.get(p, [])]
        return worst_verdict([*own, *(worst(c) for c in children.get(p, []))])

    def node(p: str) -> str:
        w = worst(p)
        label = f"{esc(p or '<root>')} ({esc(result.modules.get(p, ''))}): {w.value if w else '-'}"
        body = "".join(_entry_table(e, stats) for e in by_module.get(p, []))
        body += "".join(node(c) for c in children.get(p, []))
        is_open = " open" if w is Verdict.FAIL else ""
        return f'<details{is_open}><summary class="v-{w.name if w else "none"}">{label}</summary>{body}</details>'

    head = esc(result.summary()).replace("\n", "<br>")
    body = (f"<h1>ditorch compare-runs</h1><p class=\"meta\">reference {esc(result.ref_path)}<br>test "
            f"{esc(result.test_path)}<br>fp64 {esc(str(result.fp64_path))}</p><p><b>{head}</b></p>"
            f"<p>alignment: {esc(json.dumps(result.alignment.counts()))}</p>{node('')}")
    return write_page(path, "ditorch compare-runs", body, _CSS)
