"""The one HTML writer (:mod:`diopi.html_page`): escaping, one self-contained page, written in one step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from diopi.html_page import CSS, esc, table, verdict_cell, write_page

NASTY = "<script>alert(1)</script>"


def test_write_page_escapes_and_is_self_contained(tmp_path: Path) -> None:
    body = table(["name", NASTY], [f"<tr><td>{esc(NASTY)}</td>{verdict_cell('FAIL', NASTY)}</tr>"])
    out = write_page(tmp_path / "p.html", f"title {NASTY}", body, extra_css=".x{color:red}", scripts="var a = 1;")
    assert out == tmp_path / "p.html"
    text = out.read_text(encoding="utf-8")
    assert NASTY not in text and text.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 4  # title, th, 2 cells
    assert text.startswith("<!DOCTYPE html>") and text.count("<html") == 1 and text.rstrip().endswith("</html>")
    assert text.count("<style>") == 1 and CSS in text and ".x{color:red}" in text
    assert text.count("<script") == 1 and "<script>var a = 1;</script>" in text
    assert "http" not in text and "<link" not in text and "@import" not in text
    assert not re.search(r"""(src|href)\s*=""", text)
    with pytest.raises(ValueError):
        write_page(tmp_path / "q.html", "t", "", scripts="x = '</SCRIPT>';")
    assert not (tmp_path / "q.html").exists()
    assert "<script" not in write_page(tmp_path / "r.html", "t", "<p>x</p>").read_text(encoding="utf-8")


def test_write_page_replaces_a_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_text("old " * 10_000, encoding="utf-8")
    with open(path, encoding="utf-8") as reader:  # a reader of the old page keeps reading the old page
        write_page(path, "new", "<p>new</p>")
        assert reader.read() == "old " * 10_000
    text = path.read_text(encoding="utf-8")
    assert "old" not in text and text.rstrip().endswith("</html>") and "<p>new</p>" in text
    assert [p.name for p in tmp_path.iterdir()] == ["page.html"]  # no temporary file left
