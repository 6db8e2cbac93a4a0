"""Regenerate the OpInfo conformance expectations and the counts in docs/opinfo.md.

    python tests/torch_dipu/update_opinfo_expectations.py [-j JOBS] [--check] [OP ...]

Runs every OpInfo op (forward and backward) on dipu against CPU, writes
``opinfo_expected_failures.json`` (op -> {mode: reason}) and ``opinfo_skips.json``, and rewrites the
generated section of ``docs/opinfo.md``. ``--check`` only prints the differences to the checked-in
list. Naming ops runs only those and updates only their entries.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import opinfo_harness as h  # noqa: E402

DOC = HERE.parents[1] / "docs" / "opinfo.md"
BEGIN, END = "<!-- BEGIN GENERATED: update_opinfo_expectations.py -->", "<!-- END GENERATED -->"


def _run_one(name: str) -> tuple[str, dict[str, h.Outcome]]:
    return name, {mode: h.run_op(name, mode) for mode in h.MODES}


def run_all(names: list[str], jobs: int) -> dict[str, dict[str, h.Outcome]]:
    results: dict[str, dict[str, h.Outcome]] = {}
    if jobs <= 1:
        for name in names:
            results[name] = _run_one(name)[1]
    else:
        with ProcessPoolExecutor(jobs) as pool:
            for name, res in pool.map(_run_one, names, chunksize=4):
                results[name] = res
    return {name: results[name] for name in names}


def _reason_kind(reason: str) -> str:
    """A failure reason without sample index and numbers, for grouping."""
    text = reason.split(": ", 1)[1] if reason.startswith("sample ") else reason
    return text[:90]


def render_doc(results: dict[str, dict[str, h.Outcome]], seconds: float) -> str:
    counts = h.summarize(results)
    lines = [BEGIN, "", f"Ops in the suite (float32 on CPU): **{len(results)}**. Full run: {seconds:.0f} s.", ""]
    lines += ["| mode | pass | fail | skip | pass rate (pass / (pass + fail)) |", "|---|---|---|---|---|"]
    for mode in h.MODES:
        c = counts[mode]
        rate = 100.0 * c["pass"] / c["total"] if c["total"] else 100.0
        lines.append(f"| {mode} | {c['pass']} | {c['fail']} | {c['skip']} | {rate:.1f}% |")
    for status, title in (("fail", "Failures"), ("skip", "Skips")):
        lines += ["", f"### {title}", ""]
        rows = [(n, m, r[m].reason) for n, r in results.items() for m in h.MODES if r[m].status == status]
        if status == "skip":
            kinds = Counter((m, _reason_kind(reason)) for _, m, reason in rows)
            lines += ["Grouped by reason:", "", "| mode | reason | ops |", "|---|---|---|"]
            for (mode, kind), n in kinds.most_common():
                lines.append(f"| {mode} | {kind.replace('|', '/')} | {n} |")
            lines += [""]
        if not rows:
            lines.append("None.")
            continue
        lines += ["| op | mode | reason |", "|---|---|---|"]
        lines += [f"| `{n}` | {m} | {reason.replace('|', '/')} |" for n, m, reason in rows]
    lines += ["", END]
    return "\n".join(lines)


def write_doc(section: str) -> None:
    text = DOC.read_text() if DOC.exists() else f"# OpInfo conformance\n\n{BEGIN}\n{END}\n"
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(head + section + tail)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--check", action="store_true", help="report differences, write nothing")
    parser.add_argument("ops", nargs="*", help="only these ops (full OpInfo names)")
    opts = parser.parse_args()

    all_names = list(h.conformance_ops())
    names = opts.ops or all_names
    unknown = [n for n in names if n not in h.conformance_ops()]
    if unknown:
        parser.error(f"unknown ops: {', '.join(unknown)}")
    start = time.perf_counter()
    results = run_all(names, opts.jobs)
    seconds = time.perf_counter() - start

    old = h.load_expectations()
    new = {k: v for k, v in old.items() if k not in names and k in h.conformance_ops()}
    skips = json.loads(h.SKIPS.read_text()) if h.SKIPS.exists() and opts.ops else {}
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
    counts = h.summarize(results)
    for mode in h.MODES:
        c = counts[mode]
        rate = 100.0 * c["pass"] / c["total"] if c["total"] else 100.0
        print(f"{mode}: pass {c['pass']} fail {c['fail']} skip {c['skip']} ({rate:.1f}%)")
    print(f"{len(names)} ops in {seconds:.0f} s")
    if opts.check:
        return 0
    order = {n: i for i, n in enumerate(all_names)}
    h.EXPECTATIONS.write_text(json.dumps(dict(sorted(new.items(), key=lambda kv: order[kv[0]])), indent=1) + "\n")
    h.SKIPS.write_text(json.dumps(dict(sorted(skips.items(), key=lambda kv: order[kv[0]])), indent=1) + "\n")
    if not opts.ops:
        write_doc(render_doc(results, seconds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
