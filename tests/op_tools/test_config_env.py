"""The environment switches of op_tools (op_tools.config) and the shared parsers of diopi.env: errors that
name the variable, the boolean words, re-reading at each start(), and the op-list compiler's matches."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from diopi import steps
from diopi.env import FALSE_WORDS, TRUE_WORDS, compile_op_list, env_flag, op_list_matches, parse_flag
from op_tools import OpAutoCompare, OpObserve, config
from op_tools.engine import engine
from op_tools.op_filter import OpFilter


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No op_tools variable of the outer environment leaks in; results go to tmp_path; no tool stays active."""
    monkeypatch.setattr(steps, "_step", steps.current_step())
    for name in list(os.environ):
        if name.startswith("OP_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OP_TOOLS_RESULTS_DIR", str(tmp_path / "results"))
    yield
    for tool in list(engine.tools):
        tool.stop()


# -- 1. a bad value names the variable ------------------------------------------------------------------
BAD_VALUES: list[tuple[Callable[..., object], str, str]] = [
    (config.autocompare_config, "OP_AUTOCOMPARE_MAX_CASES", "x"),
    (config.autocompare_config, "OP_AUTOCOMPARE_MAX_CASES", "-1"),
    (config.autocompare_config, "OP_AUTOCOMPARE_STEPS", "4-2"),
    (config.capture_config, "OP_CAPTURE_MODE", "everything"),
    (config.capture_config, "OP_CAPTURE_MAX_BYTES", "lots"),
    (config.capture_config, "OP_CAPTURE_STEPS", "x"),
    (config.time_measure_config, "OP_TIME_MEASURE_MODE", "fast"),
    (config.time_measure_config, "OP_TIME_MEASURE_TOP", "ten"),
    (config.time_measure_config, "OP_TIME_MEASURE_TOP", "-3"),
    (config.time_measure_config, "OP_TIME_MEASURE_STEPS", "0"),
    (config.overflow_check_config, "OP_OVERFLOW_CHECK_STEPS", "a-b"),
    (config.fallback_config, "OP_FALLBACK_RETRY_FLOAT32", "maybe"),
    (config.observe_config, "OP_TOOLS_VERBOSE", "loud"),
]


@pytest.mark.parametrize(("read", "name", "value"), BAD_VALUES, ids=[f"{n}={v}" for _, n, v in BAD_VALUES])
def test_a_bad_value_is_one_error_naming_the_variable_and_the_value(read: Callable[..., object], name: str,
                                                                    value: str) -> None:
    with pytest.raises(ValueError) as info:
        read({name: value})
    message = str(info.value)
    assert name in message and repr(value) in message, message
    assert message.count(name) == 1  # one error, said once


def test_max_cases_message_and_good_values() -> None:
    with pytest.raises(ValueError, match=r"^OP_AUTOCOMPARE_MAX_CASES='x': expected a non-negative integer$"):
        config.autocompare_config({"OP_AUTOCOMPARE_MAX_CASES": "x"})
    assert config.autocompare_config({}).max_cases == 100
    assert config.autocompare_config({"OP_AUTOCOMPARE_MAX_CASES": " 7 "}).max_cases == 7
    assert config.time_measure_config({"OP_TIME_MEASURE_TOP": "0"}).top == 0
    assert config.time_measure_config({"OP_TIME_MEASURE_MODE": "SYNC"}).mode == "sync"
    cfg = config.capture_config({"OP_CAPTURE_MAX_BYTES": "1GiB", "OP_CAPTURE_MODE": "stats",
                                 "OP_CAPTURE_LIST": " torch.add , torch.mul", "OP_CAPTURE_STEPS": "2-4"})
    assert (cfg.max_bytes, cfg.mode, cfg.steps) == (2**30, "stats", "2-4")
    assert (cfg.ops, cfg.disable_ops) == (("torch.add", "torch.mul"), None)
    with pytest.raises(AttributeError):
        cfg.mode = "data"  # type: ignore[misc]  # frozen


def test_a_tool_constructor_reports_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OP_AUTOCOMPARE_MAX_CASES", "many")
    with pytest.raises(ValueError, match="OP_AUTOCOMPARE_MAX_CASES='many'"):
        OpAutoCompare(device="cpu")
    # The tool's variables are read together: a malformed one is an error even where a keyword overrides it.
    with pytest.raises(ValueError, match="OP_AUTOCOMPARE_MAX_CASES='many'"):
        OpAutoCompare(device="cpu", max_cases=3)
    monkeypatch.setenv("OP_AUTOCOMPARE_MAX_CASES", "5")
    assert OpAutoCompare(device="cpu").max_cases == 5
    assert OpAutoCompare(device="cpu", max_cases=3).max_cases == 3  # a keyword wins


def test_op_tools_modules_read_the_environment_only_in_config() -> None:
    import op_tools

    root = Path(op_tools.__file__).parent
    readers = [p.name for p in sorted(root.glob("*.py"))
               if p.name != "config.py" and re.search(r"os\.environ|os\.getenv", p.read_text(encoding="utf-8"))]
    assert readers == []


# -- 2. the boolean words -------------------------------------------------------------------------------
@pytest.mark.parametrize("word", ["1", "true", "True", " YES ", "on", "On"])
def test_true_words(word: str) -> None:
    assert parse_flag(word) is True
    assert env_flag("OP_X", env={"OP_X": word}) is True
    assert config.fallback_config({"OP_FALLBACK_RETRY_FLOAT32": word}).retry_float32 is True


@pytest.mark.parametrize("word", ["0", "false", "FALSE", " no", "off", ""])
def test_false_words(word: str) -> None:
    assert parse_flag(word) is False
    assert env_flag("OP_X", default=True, env={"OP_X": word}) is False


def test_documented_words_and_rejection_naming_the_variable() -> None:
    assert TRUE_WORDS == ("1", "true", "yes", "on") and FALSE_WORDS == ("0", "false", "no", "off", "")
    assert env_flag("OP_X", env={}) is False and env_flag("OP_X", default=True, env={}) is True
    for bad in ("2", "y", "enable", "truth"):
        assert parse_flag(bad) is None
        with pytest.raises(ValueError, match=rf"OP_TOOLS_VERBOSE={bad!r}"):
            config.verbose({"OP_TOOLS_VERBOSE": bad})


def test_the_other_packages_use_the_same_words() -> None:
    from ditorch.mocking.switches import DEFAULT_CASTS, parse_dtype_cast
    from op_tools.run_op_from_data import _flag

    for word in TRUE_WORDS:
        assert parse_dtype_cast(word) == DEFAULT_CASTS
        if word:
            assert _flag(word) is True
    for word in FALSE_WORDS:
        assert parse_dtype_cast(word) is None
        assert _flag(word) is False
    with pytest.raises(argparse.ArgumentTypeError):
        _flag("maybe")


# -- 3. re-read at each start() ---------------------------------------------------------------------------
_A, _B = torch.ones(2, 2), torch.full((2, 2), 2.0)


def _run_ops() -> None:
    a, b = _A, _B
    a.add(b)
    a.mul(b)
    a.sub(b)


def _forward_names(path: Path) -> list[str]:
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("OpObserve: ")]
    return [line.split()[1] for line in lines if " backward (" not in line]


def test_one_observe_object_follows_the_lists_in_force_at_each_start(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    out = tmp_path / "observe.txt"
    monkeypatch.setenv("OP_OBSERVE_LIST", "torch.Tensor.add")
    tool = OpObserve(device="cpu", backward=False)
    monkeypatch.setenv("OP_OBSERVE_FILE", str(out))  # read at start too
    monkeypatch.setenv("OP_OBSERVE_LIST", "torch.Tensor.mul")  # changed after construction: start() sees it
    tool.start()
    _run_ops()
    tool.stop()
    assert _forward_names(out) == ["torch.Tensor.mul"]
    monkeypatch.setenv("OP_OBSERVE_LIST", r"torch\.Tensor\.(add|sub)")
    monkeypatch.setenv("OP_OBSERVE_DISABLE_LIST", "torch.Tensor.sub")
    with tool:
        _run_ops()
    assert _forward_names(out) == ["torch.Tensor.mul", "torch.Tensor.add"]
    monkeypatch.delenv("OP_OBSERVE_LIST")
    monkeypatch.delenv("OP_OBSERVE_DISABLE_LIST")
    with tool:
        _run_ops()
    assert _forward_names(out)[2:] == ["torch.Tensor.add", "torch.Tensor.mul", "torch.Tensor.sub"]


def test_explicit_keywords_still_win_at_each_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = tmp_path / "observe.txt"
    tool = OpObserve(device="cpu", backward=False, file=out, ops="torch.Tensor.sub")
    for env_list in ("torch.Tensor.add", "torch.Tensor.mul"):
        monkeypatch.setenv("OP_OBSERVE_LIST", env_list)
        monkeypatch.setenv("OP_OBSERVE_FILE", str(tmp_path / "elsewhere.txt"))
        with tool:
            _run_ops()
    assert _forward_names(out) == ["torch.Tensor.sub", "torch.Tensor.sub"]
    assert not (tmp_path / "elsewhere.txt").exists()


def test_tool_options_are_reread_at_start_and_a_bad_one_fails_start(monkeypatch: pytest.MonkeyPatch) -> None:
    tool = OpAutoCompare(device="cpu", report=False)
    assert tool.max_cases == 100
    monkeypatch.setenv("OP_AUTOCOMPARE_MAX_CASES", "4")
    with tool:
        assert tool.max_cases == 4 and tool.config.max_cases == 4
    monkeypatch.setenv("OP_AUTOCOMPARE_MAX_CASES", "four")
    with pytest.raises(ValueError, match="OP_AUTOCOMPARE_MAX_CASES='four'"):
        tool.start()
    assert not tool.active and tool not in engine.tools


# -- 4. the shared op-list compiler: the same matches as the two copies it replaces ---------------------
def _old_op_tools_matches(entries: list[str], name: str) -> bool:
    patterns = [re.compile(e) for e in entries]
    return any(p.pattern == name or p.fullmatch(name) for p in patterns)


OP_TOOLS_PATTERNS = ["torch.Tensor.add", r"torch\.Tensor\.(add|mul)", "torch.cat", "torch.nn.functional.linear",
                     "torch.nn.functional.*", ".*", "torch.Tensor.__iadd__"]
OP_TOOLS_NAMES = ["torch.Tensor.add", "torch.Tensor.mul", "torch.Tensor.addmm", "torch.cat", "torch.concat",
                  "torch.nn.functional.linear", "torch.nn.functional.relu", "torch.Tensor.__iadd__", "xtorch.cat"]


@pytest.mark.parametrize("pattern", OP_TOOLS_PATTERNS)
def test_op_tools_lists_match_as_before(pattern: str) -> None:
    f = OpFilter("OP_X", ops=pattern)
    for name in OP_TOOLS_NAMES:
        assert f(name) == _old_op_tools_matches([pattern], name), (pattern, name)
        assert op_list_matches(compile_op_list([pattern], "OP_X_LIST"), name) == f(name)


def test_a_bad_entry_names_its_source() -> None:
    with pytest.raises(ValueError, match=r"^OP_X_LIST: entry 'torch.\(add' is not a valid regular expression"):
        compile_op_list(["torch.cat", "torch.(add"], "OP_X_LIST")
