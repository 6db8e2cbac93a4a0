"""Every snippet of README.md and docs/*.md is run (extracted from the Markdown): a snippet that breaks fails CI.

Rules (also in docs/architecture.md, "Documentation snippets"):

- ```python blocks run. The python blocks of one Markdown file run in order as one program in a fresh
  subprocess (this interpreter, the current directory an empty temporary folder, a timeout), sharing their
  names, so a later block may use what an earlier one defined. Each block is compiled with the Markdown file
  as its file name and its own line numbers, so a traceback points into the doc; a block that raises fails
  the test with the file and line of the block, and the following blocks still run. A ``>>>`` session runs
  its ``>>>``/``...`` lines only (the rest is output).
- A hidden setup, an HTML comment right before a python fence, runs first (what the reader does not need to
  see: a tiny model behind ``model``, an input for ``ids``)::

      <!-- snippet: setup
      model = torch.nn.Linear(4, 4)
      -->

- ``<!-- snippet: file NAME -->`` before a block (a YAML config) writes it to NAME before the file's code runs.
- ```bash / ```sh / ```shell / ```console blocks are not run. Every ``ditorch ...`` command in them (after
  ``$ `` and ``VAR=value`` prefixes, also after ``&&``, ``|`` or ``;``; in console and output blocks only the
  ``$ `` lines) is parsed by ``ditorch.cli.build_parser()``, so a flag or subcommand that does not exist fails,
  naming the file and line; ``python -m <module>`` must name an importable module (``ditorch``'s commands,
  ``diopi.conformance`` and ``op_tools.run_op_from_data`` have their arguments parsed too, also after
  ``torchrun`` / ``-m torch.distributed.run``), and scripts and pytest paths with a folder must exist in the
  repository. A synopsis (``[--steps N]``) is not a command and fails.
- ``<!-- snippet: skip (reason) -->`` right before a fence skips that block (reported as a pytest skip with its
  reason): for what cannot run in CI (a GPU, torchrun with several processes, a download, a long training).
- Other blocks (```text, no language, toml, yaml, json) are output or configuration and are not run.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_LANGS = {"python", "py"}
SHELL_LANGS = {"bash", "sh", "console", "shell", "shell-session"}
OUTPUT_LANGS = {"", "text"}
PROGRAM_TIMEOUT_S = 240

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\s]*)[^`]*$")
_SKIP = re.compile(r"^\s*<!--\s*snippet:\s*skip\s*(?:\((?P<reason>.*)\))?\s*-->\s*$")
_SETUP_OPEN = re.compile(r"^\s*<!--\s*snippet:\s*setup\s*$")
_FILE = re.compile(r"^\s*<!--\s*snippet:\s*file\s+(?P<name>[\w.-]+)\s*-->\s*$")


def _rel(doc: Path) -> str:
    """The doc's path as messages give it: relative to the repository when inside it."""
    return str(doc.relative_to(ROOT)) if doc.is_relative_to(ROOT) else str(doc)


@dataclasses.dataclass
class Block:
    doc: Path
    line: int  # 1-based line of the first code line (the one after the opening fence)
    lang: str
    code: str
    skip: str | None = None  # the reason, when marked skip
    setup: str = ""  # hidden setup code (from a <!-- snippet: setup ... --> comment before the fence)
    setup_line: int = 0
    file: str | None = None  # <!-- snippet: file NAME -->: written to NAME in the snippets' folder first

    @property
    def where(self) -> str:
        return f"{_rel(self.doc)}:{self.line}"


def extract_blocks(doc: Path) -> list[Block]:
    """The fenced code blocks of ``doc``, in order, with their markers."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m["indent"]), m["fence"], m["info"].lower()
        start = i + 1
        j = start
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = [ln[indent:] if ln[:indent].strip() == "" else ln.lstrip() for ln in lines[start:j]]
        block = Block(doc, start + 1, lang, "\n".join(body) + "\n")
        _read_markers(lines, i, block)
        blocks.append(block)
        i = j + 1
    return blocks


def _read_markers(lines: list[str], fence_index: int, block: Block) -> None:
    """The skip marker and/or hidden setup in the lines right before the fence (blank lines allowed)."""
    k = fence_index - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    while k >= 0:
        skip = _SKIP.match(lines[k])
        if skip:
            block.skip = skip["reason"] or "marked skip"
            k -= 1
            continue
        file = _FILE.match(lines[k])
        if file:
            block.file = file["name"]
            k -= 1
            continue
        if lines[k].strip() == "-->":
            opening = k - 1
            while opening >= 0 and not _SETUP_OPEN.match(lines[opening]):
                if "-->" in lines[opening] or "<!--" in lines[opening]:
                    return
                opening -= 1
            if opening < 0:
                return
            block.setup = "\n".join(lines[opening + 1:k]) + "\n"
            block.setup_line = opening + 2
            k = opening - 1
            continue
        return


def _all_blocks() -> list[Block]:
    return [b for doc in DOCS for b in extract_blocks(doc)]


# --------------------------------------------------------------------------------------------------- python

_RUNNER = r'''
import json, sys, traceback
program = json.loads(sys.stdin.read())
namespace = {"__name__": "__main__"}
results = []
for block in program:
    print("\n@@SNIPPET-STARTED@@" + block["where"], flush=True)
    try:
        for code, line in block["parts"]:
            exec(compile("\n" * (line - 1) + code, block["doc"], "exec"), namespace)
    except BaseException as exc:  # SystemExit included: a snippet must not exit
        results.append({"where": block["where"], "error": "".join(traceback.format_exception(exc))[-4000:]})
    else:
        results.append({"where": block["where"], "error": None})
    sys.stdout.flush()
    sys.stderr.flush()
print("\n@@SNIPPET-RESULTS@@" + json.dumps(results))
'''


def _python_source(code: str) -> str:
    """The code of a python block; a console session (first line ``>>> ``) keeps its ``>>> ``/``... `` lines
    only (the rest is output), each on its own line number."""
    first = next((ln for ln in code.splitlines() if ln.strip()), "")
    if not first.startswith(">>>"):
        return code
    kept = [ln[4:] if ln.startswith((">>> ", "... ")) else "" for ln in code.splitlines()]
    return "\n".join(kept) + "\n"


def _python_programs() -> list[tuple[str, list[Block]]]:
    """Per Markdown file with python blocks: its blocks to run and to write as files (in order)."""
    out = []
    for doc in DOCS:
        blocks = [b for b in extract_blocks(doc)
                  if b.skip is None and (b.lang in RUN_LANGS or b.file is not None)]
        if any(b.lang in RUN_LANGS and b.file is None for b in blocks):
            out.append((_rel(doc), blocks))
    return out


def _skipped() -> list[Block]:
    return [b for b in _all_blocks() if b.skip is not None and (b.lang in RUN_LANGS or b.lang in SHELL_LANGS)]


def _snippet_env() -> dict[str, str]:
    env = dict(os.environ)
    # the test session's own switches (tests/conftest.py) are not the reader's
    for name in ("DITORCH_DISABLE_MOCK", "DITORCH_QUIET", "PYTEST_XDIST_WORKER", "PYTEST_CURRENT_TEST"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


_STARTED = "@@SNIPPET-STARTED@@"
_RESULTS = "@@SNIPPET-RESULTS@@"


def _last_started(stdout: str | bytes | None) -> str:
    text = stdout.decode(errors="replace") if isinstance(stdout, bytes) else (stdout or "")
    started = [ln.split(_STARTED, 1)[1] for ln in text.splitlines() if _STARTED in ln]
    return started[-1] if started else "before the first snippet"


def run_snippets(doc: str, blocks: list[Block], folder: Path, timeout: float = PROGRAM_TIMEOUT_S) -> str | None:
    """Run the python blocks of ``doc`` as one program in ``folder``; None when every block ran, else the
    failure message (naming the file and line of each failing block)."""
    program = []
    for b in blocks:
        if b.file is not None:
            (folder / b.file).write_text(b.code, encoding="utf-8")
            continue
        parts = ([(b.setup, b.setup_line)] if b.setup else []) + [(_python_source(b.code), b.line)]
        program.append({"where": b.where, "doc": _rel(b.doc), "parts": parts})
    started = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(program), cwd=folder,
                              env=_snippet_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return (f"{doc}: the python snippets took more than {timeout:g} s; still running: snippet "
                f"{_last_started(exc.stdout)}")
    elapsed = time.perf_counter() - started
    if _RESULTS not in proc.stdout:
        return (f"{doc}: the snippet program died (exit status {proc.returncode}) in snippet "
                f"{_last_started(proc.stdout)}\nstderr (tail):\n{proc.stderr[-4000:]}")
    results = json.loads(proc.stdout.rsplit(_RESULTS, 1)[1])
    failed = [r for r in results if r["error"]]
    if not failed:
        return None
    report = "\n\n".join(f"snippet {r['where']} failed:\n{r['error']}" for r in failed)
    return (f"{len(failed)} of {len(results)} python snippets of {doc} failed ({elapsed:.1f} s):\n\n{report}"
            f"\n\nstderr (tail):\n{proc.stderr[-2000:]}")


_PROGRAMS = _python_programs()


@pytest.mark.parametrize("doc,blocks", _PROGRAMS, ids=[d for d, _ in _PROGRAMS])
def test_python_snippets_run(doc, blocks, tmp_path):
    failure = run_snippets(doc, blocks, tmp_path)
    if failure:
        pytest.fail(failure, pytrace=False)


_SKIPPED = _skipped()
if _SKIPPED:  # no test at all when nothing is marked (pytest would report an empty parameter set)
    @pytest.mark.parametrize("block", _SKIPPED, ids=[b.where for b in _SKIPPED])
    def test_skipped_snippets(block):
        pytest.skip(f"{block.where} ({block.lang}): {block.skip}")


# --------------------------------------------------------------------------------------------------- shell

@dataclasses.dataclass
class Command:
    where: str
    argv: list[str]
    text: str


_UNPARSABLE = "<unparsable>"
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SEPARATORS = {"&&", "||", "|", ";", "&", "(", ")"}


def _split(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def _commands(block: Block) -> list[Command]:
    """The commands of a shell block: lines joined at a trailing backslash, ``$ `` prompts removed, output
    lines of a console block (no prompt) ignored, split at ``&&``, ``|``, ``;``."""
    out = []
    lines = block.code.splitlines()
    i = 0
    while i < len(lines):
        first = i
        text = lines[i]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1] + " " + lines[i]
        i += 1
        stripped = text.strip()
        if block.lang not in SHELL_LANGS - {"console", "shell-session"} and not stripped.startswith("$ "):
            continue  # output of a console block (or of an output block with ``$ command`` lines)
        stripped = stripped.removeprefix("$ ")
        if not stripped or stripped.startswith("#"):
            continue
        while True:
            try:
                tokens = _split(stripped)
                break
            except ValueError as exc:
                if "closing quotation" in str(exc) and i < len(lines):  # a quoted argument over several lines
                    stripped += "\n" + lines[i]
                    i += 1
                    continue
                tokens = [_UNPARSABLE, str(exc)]
                break
        if tokens[:1] == [_UNPARSABLE]:
            out.append(Command(f"{_rel(block.doc)}:{block.line + first}", tokens, stripped))
            continue
        segment: list[str] = []
        for token in [*tokens, ";"]:
            if token in _SEPARATORS:
                while segment and _ASSIGNMENT.match(segment[0]):
                    segment.pop(0)
                if segment and segment[0] == "env":
                    segment.pop(0)
                    while segment and _ASSIGNMENT.match(segment[0]):
                        segment.pop(0)
                if segment:
                    out.append(Command(f"{_rel(block.doc)}:{block.line + first}", segment, stripped))
                segment = []
            else:
                segment.append(token)
    return out


def _checked_commands() -> list[Command]:
    """The commands of shell blocks, and the ``$ command`` lines of output blocks (```text, no language)."""
    commands = []
    for b in _all_blocks():
        if (b.lang in SHELL_LANGS or b.lang in OUTPUT_LANGS) and b.skip is None:
            commands.extend(c for c in _commands(b) if _kind(c.argv) is not None)
    return commands


def _kind(argv: list[str]) -> str | None:
    """Which check a command gets: ``ditorch``, ``python`` (``python -m``, ``python file.py``), ``torchrun``,
    ``pytest``; None: not checked (``pip``, ``export``, ``grep``, ...)."""
    if argv[0] in ("ditorch", _UNPARSABLE):
        return argv[0]
    if argv[0] in ("python", "python3") and len(argv) > 1:
        return "python"
    if argv[0] in ("torchrun", "pytest"):
        return argv[0]
    return None


class _ParseError(Exception):
    pass


def _parse_ditorch(argv: list[str]) -> None:
    """Parse ``ditorch <argv>`` with the real parser; every (sub)parser raises instead of exiting."""
    from ditorch.cli import build_parser

    parser = build_parser()

    def fail(message: str) -> None:
        raise _ParseError(message)

    stack = [parser]
    while stack:
        p = stack.pop()
        p.error = fail
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
    try:
        parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version
        if exc.code not in (0, None):
            raise _ParseError(f"exit status {exc.code}") from None
    except argparse.ArgumentError as exc:
        raise _ParseError(str(exc)) from None


def _ditorch_commands() -> set[str]:
    from ditorch.cli import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def _check_module(module: str, rest: list[str]) -> None:
    """``python -m module rest``: the module exists; what follows is checked where we know its parser."""
    if importlib.util.find_spec(module) is None:
        raise _ParseError(f"no module named {module}")
    if module == "ditorch":
        # ``python -m ditorch <command> ...`` is the CLI; ``python -m ditorch script.py ...`` runs a script
        if rest and (rest[0].startswith("-") and rest[0] != "--" or rest[0] in _ditorch_commands()):
            _parse_ditorch(rest)
    elif module in _MODULE_AS_SUBCOMMAND:
        _parse_ditorch([*_MODULE_AS_SUBCOMMAND[module], *rest])
    elif module == "pytest":
        _check_pytest(rest)
    elif module == "torch.distributed.run":
        _check_launcher(rest)


def _check_launcher(args: list[str]) -> None:
    """torchrun's arguments: a ``-m module ...`` or a script after the launcher's options."""
    if "-m" in args:
        i = args.index("-m")
        if i + 1 < len(args):
            _check_module(args[i + 1], args[i + 2:])
        return
    _check_script(next((a for a in args if a.endswith(".py")), ""))


def _check_pytest(args: list[str]) -> None:
    for arg in args:
        path = arg.split("::")[0]
        if not arg.startswith("-") and (path.startswith("tests/") or path.endswith(".py")) \
                and not (ROOT / path).exists():
            raise _ParseError(f"pytest path {path} is not in the repository")


def _check_script(script: str) -> None:
    """A script given with a folder (``benchmarks/bench_dicp.py``) must be in the repository; a bare
    ``train.py`` is the reader's own."""
    if script.endswith(".py") and "/" in script and not script.startswith(("/", "~")) \
            and not (ROOT / script).exists():
        raise _ParseError(f"{script} is not in the repository")


#: ``python -m`` modules whose arguments are a ditorch subcommand's
_MODULE_AS_SUBCOMMAND = {"diopi.conformance": ["conformance"], "op_tools.run_op_from_data": ["replay"]}


def _check_python(argv: list[str]) -> None:
    args = argv[1:]
    while args and args[0] in ("-u", "-B", "-O", "-X", "-W"):
        args = args[2:] if args[0] in ("-X", "-W") else args[1:]
    if not args or args[0] == "-c":
        return
    if args[0] == "-m":
        if len(args) < 2:
            raise _ParseError("python -m without a module")
        _check_module(args[1], args[2:])
        return
    _check_script(args[0])


def _check(command: Command) -> None:
    kind = _kind(command.argv)
    if kind == _UNPARSABLE:
        raise _ParseError(f"not a shell command line: {command.argv[1]}")
    if kind == "ditorch":
        _parse_ditorch(command.argv[1:])
    elif kind == "python":
        _check_python(command.argv)
    elif kind == "torchrun":
        _check_launcher(command.argv[1:])
    elif kind == "pytest":
        _check_pytest(command.argv[1:])


_COMMANDS = _checked_commands()


@pytest.mark.parametrize("command", _COMMANDS, ids=[f"{c.where}:{c.argv[0]}" for c in _COMMANDS])
def test_shell_commands_parse(command):
    synopsis = [t for t in command.argv if t.startswith("[") or t.endswith("]")]
    if synopsis:
        pytest.fail(f"{command.where}: `{command.text}` is a synopsis ({' '.join(synopsis)}), not a command: write "
                    f"a real one (options go in the text or a table)", pytrace=False)
    try:
        _check(command)
    except _ParseError as exc:
        pytest.fail(f"{command.where}: `{command.text}` does not parse: {exc}", pytrace=False)


# --------------------------------------------------------------------------------------------------- the rules

SAMPLE = """# Sample

<!-- snippet: setup
model = 1
-->
```python
print(model)
```

<!-- snippet: skip (needs torchrun) -->
```python
raise SystemExit(1)
```

<!-- snippet: file conf.yaml -->
```yaml
a: 1
```

  ```bash
  FOO=1 ditorch demo --steps 2 && ditorch info --no-such-flag   # comment
  python -m diopi.conformance count
  DIPU_DEVICE=x python -c "
  print(1)"
  echo 'unclosed
  ```

```
$ ditorch demo --list-models
llama        Llama: ...
```
"""


def test_the_extraction_rules(tmp_path):
    doc = tmp_path / "sample.md"
    doc.write_text(SAMPLE, encoding="utf-8")
    blocks = extract_blocks(doc)
    assert [(b.line, b.lang) for b in blocks] == [(7, "python"), (12, "python"), (17, "yaml"), (21, "bash"), (29, "")]
    assert (blocks[0].setup, blocks[0].setup_line, blocks[0].skip) == ("model = 1\n", 4, None)
    assert blocks[1].skip == "needs torchrun" and blocks[1].setup == ""
    assert blocks[2].file == "conf.yaml"
    bash = [c.argv for c in _commands(blocks[3])]
    assert bash == [["ditorch", "demo", "--steps", "2"], ["ditorch", "info", "--no-such-flag"],
                    ["python", "-m", "diopi.conformance", "count"], ["python", "-c", "\nprint(1)"],
                    [_UNPARSABLE, "No closing quotation"]]
    assert [c.argv for c in _commands(blocks[4])] == [["ditorch", "demo", "--list-models"]]
    assert _python_source(">>> x = 1\n2\n>>> if x:\n...     print(x)\n") == "x = 1\n\nif x:\n    print(x)\n"


def test_a_wrong_command_is_caught():
    _parse_ditorch(["demo", "--steps", "2"])
    with pytest.raises(_ParseError, match="--no-such-flag"):
        _parse_ditorch(["info", "--no-such-flag"])
    with pytest.raises(_ParseError, match="invalid choice"):
        _parse_ditorch(["no-such-command"])
    with pytest.raises(_ParseError, match="no module named"):
        _check_python(["python", "-m", "no_such_module_here"])
    with pytest.raises(_ParseError, match="not in the repository"):
        _check_python(["python", "benchmarks/no_such_bench.py"])
    with pytest.raises(_ParseError):
        _check_launcher(["--nproc_per_node", "2", "-m", "ditorch", "run", "--no-such-tool", "--", "train.py"])
    _check_python(["python", "-m", "ditorch", "train.py", "--lr", "3e-4"])  # a script, not a command


def test_a_failing_snippet_is_named_by_file_and_line(tmp_path):
    doc = tmp_path / "broken.md"
    doc.write_text("Text.\n\n```python\nx = 1\n```\n\n```python\ny = x +\\\n    undefined_name\n```\n\n"
                   "```python\nprint(x)\n```\n\n```python\nimport os\nos._exit(3)\n```\n", encoding="utf-8")
    blocks = extract_blocks(doc)
    failure = run_snippets("broken.md", blocks[:3], tmp_path)
    assert failure.startswith("1 of 3 python snippets of broken.md failed"), failure
    assert f"snippet {doc}:8 failed" in failure and f'File "{doc}", line 9' in failure, failure
    assert "NameError: name 'undefined_name' is not defined" in failure
    died = run_snippets("broken.md", blocks, tmp_path)
    assert died.startswith(f"broken.md: the snippet program died (exit status 3) in snippet {doc}:17"), died
    doc.write_text("```python\nimport time\ntime.sleep(60)\n```\n", encoding="utf-8")
    hung = run_snippets("broken.md", extract_blocks(doc), tmp_path, timeout=3)
    assert hung == f"broken.md: the python snippets took more than 3 s; still running: snippet {doc}:2", hung
