"""The repository promises: the README's commands are the ones CI runs; files are written whole."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _last_command(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return lines[-1]


def test_ci_runs_the_readme_test_command() -> None:
    ci_command = _last_command((ROOT / ".ci" / "run").read_text())
    readme = (ROOT / "README.md").read_text()
    assert ci_command.startswith("pip install torch==2.13.0")
    assert f"\n{ci_command}\n" in readme, f"README does not show the CI test command: {ci_command}"


def test_readme_demo_command_installs_torch_pin() -> None:
    readme = (ROOT / "README.md").read_text()
    assert '\npip install torch==2.13.0 -e ".[demo]" && ditorch demo\n' in readme


def test_every_file_a_tool_writes_whole_goes_through_atomic_open() -> None:
    """A file written in one go appears whole or not at all: ``diopi.case_format.atomic_open`` (a temporary name, then
    a rename). Append-mode logs (results tables, the observe stream, capture's index) are written line by line."""
    src = ROOT / "src"
    pattern = re.compile(r"\.write_text\(|\.write_bytes\(|(?<![\w.])open\([^)]*[\"'](w|wb|w\+|x|xb)[\"']")
    found = [f"{path.relative_to(src)}:{number}: {line.strip()}"
             for path in sorted(src.rglob("*.py")) if path.name != "case_format.py"
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if pattern.search(line)]
    assert not found, "write these through diopi.case_format.atomic_open:\n" + "\n".join(found)
