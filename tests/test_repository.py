"""The repository promises: the README's commands are the ones CI runs."""

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
