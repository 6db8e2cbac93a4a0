"""docs/diopi_functions.md is generated from the table and must match it."""

from __future__ import annotations

from pathlib import Path

import diopi
from diopi import reference_page

PAGE = Path(__file__).resolve().parents[2] / "docs" / "diopi_functions.md"


def test_committed_page_matches_the_table() -> None:
    assert PAGE.read_text(encoding="utf-8") == reference_page.render(), (
        "docs/diopi_functions.md is stale: run python -m diopi.reference_page docs/diopi_functions.md"
    )


def test_page_lists_every_function_with_its_packets(tmp_path: Path) -> None:
    out = tmp_path / "page.md"
    assert reference_page.main([str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    for fn in diopi.functions():
        assert f"| `{fn.name}` |" in text
        assert fn.signature in text
    silu = next(line for line in text.splitlines() if line.startswith("| `diopiSiluBackward` |"))
    assert "`silu_backward`" in silu and "backward" in silu
