"""The HTML report (:mod:`op_tools.report`) and ``ditorch report``: content, escaping, embedded rows, exit codes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ditorch import cli
from op_tools.report import case_href, script_json, write_report
from op_tools.results import ResultTable, read_rows

NASTY = "<script>alert(1)</script>"
AMP = 'a&b"c'
ROWS_DATA = re.compile(r'<script type="application/json" id="rows-data">(.*?)</script>', re.S)


def make_run(run_dir: Path, n: int = 300) -> list[dict]:
    """A results table of ``n`` rows: PASS/NOISE/SKIP, FAIL every 37th row (with a case), nasty names."""
    table = ResultTable("OpAutoCompare", run_dir)
    for i in range(n):
        verdict = "FAIL" if i % 37 == 20 else "NOISE" if i % 11 == 0 else "SKIP" if i % 29 == 0 else "PASS"
        name = NASTY if i == 57 else AMP if i == 94 else f"torch.nn.functional.op{i % 7}"
        table.add({
            "id": i // 2, "name": name, "phase": "forward" if i % 3 else "backward", "verdict": verdict,
            "index": f"out[{i % 2}]", "max_abs_diff": 10.0 ** (-(i % 9)), "max_rel_diff": None if i % 13 == 0
            else float("inf") if i == 131 else 10.0 ** (-(i % 8)) * 3, "cosine": 0.999, "atol": 1e-5,
            "rtol": 1e-3, "step": 0, "dtype": "torch.float16", "shape": [4, i % 5], "message": f"m{i} </b>",
            "case_dir": f"cases/{name}/{i // 2}" if verdict == "FAIL" else "", "call_site": f"model.py:{i} in <lambda>",
        })
    table.close()
    return table.rows


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "res" / "op_autocompare" / "run1" / "rank0"
    make_run(d)
    return d


def embedded_rows(text: str) -> list:
    match = ROWS_DATA.search(text)
    assert match is not None
    return json.loads(match.group(1))


def test_report_content(run_dir: Path) -> None:
    out = write_report(run_dir)
    assert out == run_dir / "report.html" and out.is_file()
    text = out.read_text(encoding="utf-8")
    rows = read_rows(run_dir)
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("PASS", "NOISE", "SKIP", "FAIL")}
    assert counts["FAIL"] > 5
    for verdict, count in counts.items():
        assert f'data-verdict="{verdict}" data-count="{count}"' in text
    first = next(r for r in rows if r["verdict"] == "FAIL")
    header = text.split('id="first-fail"', 1)[1].split("</div>", 1)[0]
    assert first["name"] in header and f"#{first['id']}" in header and first["index"] in header
    assert "op_autocompare / run1 / rank0" in text
    # self-contained: no remote resource in any src/href attribute
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
    assert "<link" not in text and "@import" not in text


def test_report_escapes_and_embeds_rows(run_dir: Path) -> None:
    text = write_report(run_dir, title=f"title {NASTY}").read_text(encoding="utf-8")
    assert NASTY not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text  # title and per-op table, escaped
    assert 'a&amp;b&quot;c' in text
    assert text.count("</script>") == 3  # the two JSON blocks and the page script, nothing from the data
    data = ROWS_DATA.search(text).group(1)
    assert "<" not in data and ">" not in data
    assert embedded_rows(text) == read_rows(run_dir)


def test_report_links_fail_cases(run_dir: Path) -> None:
    text = write_report(run_dir).read_text(encoding="utf-8")
    rows = embedded_rows(text)
    fails = [r for r in rows if r["verdict"] == "FAIL"]
    assert fails and all(r["case_dir"] for r in fails)
    first = fails[0]
    assert f'href="{case_href(first["case_dir"])}"' in text
    assert case_href("cases/torch.mm/17") == "cases/torch.mm/17/"
    assert case_href('cases/<x>&"y/3') == "cases/%3Cx%3E%26%22y/3/"
    for bad in ("javascript:alert(1)", "//evil/x", "https://x/y", "", None):
        assert case_href(bad) is None


def test_script_json_is_inert() -> None:
    value = {"a": "</script><!-- \u2028 & x", "b": float("nan"), "c": float("-inf")}
    text = script_json(value)
    assert "</" not in text and "<!--" not in text and "\u2028" not in text
    assert json.loads(text) == {"a": value["a"], "b": None, "c": "-inf"}


def test_report_of_empty_results(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_text("", encoding="utf-8")
    text = write_report(tmp_path).read_text(encoding="utf-8")
    assert embedded_rows(text) == [] and "No FAIL rows" in text


def test_cli_report_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "res"
    for run in ("run1/rank0", "run1/rank1", "run2/rank0"):
        make_run(root / "op_autocompare" / run, n=40)
    assert cli.main(["report", str(root), "--title", "mine"]) == 0
    printed = capsys.readouterr().out.split()
    expected = sorted(str(p.parent / "report.html") for p in root.rglob("results.jsonl"))
    assert sorted(printed) == expected and len(expected) == 3
    assert "<title>mine</title>" in Path(expected[0]).read_text(encoding="utf-8")


def test_cli_report_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["report", str(empty)]) == 2
    assert str(empty) in capsys.readouterr().err
    missing = tmp_path / "missing"
    assert cli.main(["report", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err
    bad = tmp_path / "bad" / "rank0"
    make_run(bad, n=5)
    with open(bad / "results.jsonl", "a", encoding="utf-8") as f:
        f.write('{"id": 9, "name": \n')
    assert cli.main(["report", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert f"{bad / 'results.jsonl'}:6" in err
    assert not (bad / "report.html").exists()


def test_cli_report_subprocess(tmp_path: Path) -> None:
    run_dir = tmp_path / "res" / "op_autocompare" / "run1" / "rank0"
    make_run(run_dir, n=20)
    env = {**os.environ, "DITORCH_QUIET": "1"}
    proc = subprocess.run([sys.executable, "-m", "ditorch", "report", str(run_dir)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert str(run_dir / "report.html") in proc.stdout
    assert (run_dir / "report.html").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "ditorch", "report", str(empty)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 2
    assert str(empty) in proc.stderr and "results.jsonl" in proc.stderr
