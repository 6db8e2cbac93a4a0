"""The self-contained HTML page of a :class:`~module_tools.compare.RunComparison`: the module tree coloured by
each subtree's worst verdict, expandable, with every tensor's verdict, errors and statistics (no network)."""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING, Any

from diopi.compare import Verdict, worst_verdict

if TYPE_CHECKING:
    from .compare import EntryComparison, RunComparison

__all__ = ["render_html"]

_COLOURS = {None: "#888", Verdict.PASS: "#2a7d2a", Verdict.PASS_NOISE: "#b07800", Verdict.FAIL: "#c0201a"}
_CSS = ("body{font-family:sans-serif;font-size:13px}details{margin-left:1.2em}summary{cursor:pointer}"
        "table{border-collapse:collapse;margin:.3em 0 .3em 1.2em}td,th{border:1px solid #ccc;padding:1px 5px;"
        "text-align:right}td.l{text-align:left}")


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return html.escape("" if x is None else str(x))


def _entry_table(entry: EntryComparison, stats: tuple[str, ...]) -> str:
    rows = []
    for name, r in entry.tensors.items():
        t, e = entry.test_stats.get(name) or {}, entry.ref_stats.get(name) or {}
        stats = " ".join(f"{k} {_fmt(t.get(k))}/{_fmt(e.get(k))}" for k in stats)
        rows.append(f"<tr><td class=l style='color:{_COLOURS[r.verdict]}'>{html.escape(name)}</td>"
                    f"<td class=l>{html.escape(r.verdict.value)}</td><td>{_fmt(r.max_abs_error)}</td>"
                    f"<td>{_fmt(r.max_rel_error)}</td><td>{_fmt(r.cosine_similarity)}</td>"
                    f"<td class=l>{_fmt(t.get('dtype'))} {_fmt(t.get('shape'))}</td><td class=l>{stats}</td>"
                    f"<td class=l>{html.escape(r.message)}</td></tr>")
    direction = entry.direction.replace("fixed_", "fixed-input ")
    return (f"<div>step {entry.step} call {entry.call} {direction} (aligned: {entry.alignment}, reference "
            f"{html.escape(entry.ref_module or '<root>')})</div><table><tr><th>tensor</th><th>verdict</th>"
            "<th>max abs</th><th>max rel</th><th>cosine</th><th>dtype shape</th><th>stats test/ref</th>"
            "<th>message</th></tr>" + "".join(rows) + "</table>")


def render_html(result: RunComparison, stats: tuple[str, ...]) -> str:
    """A self-contained HTML page: the module tree coloured by each subtree's worst verdict, expandable, with
    every tensor's verdict, errors and ``stats`` (the names of the statistics compared, test/reference)."""
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
        label = f"{html.escape(p or '<root>')} ({html.escape(result.modules.get(p, ''))}): {w.value if w else '-'}"
        body = "".join(_entry_table(e, stats) for e in by_module.get(p, []))
        body += "".join(node(c) for c in children.get(p, []))
        is_open = " open" if w is Verdict.FAIL else ""
        return f"<details{is_open}><summary style='color:{_COLOURS[w]}'>{label}</summary>{body}</details>"

    head = html.escape(result.summary()).replace("\n", "<br>")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>ditorch compare-runs</title><style>{_CSS}"
            f"</style></head><body><h3>ditorch compare-runs</h3><p>reference {html.escape(result.ref_path)}<br>"
            f"test {html.escape(result.test_path)}<br>fp64 {html.escape(str(result.fp64_path))}</p><p><b>{head}</b>"
            f"</p><p>alignment: {html.escape(json.dumps(result.alignment.counts()))}</p>{node('')}</body></html>")
