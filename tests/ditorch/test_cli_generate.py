"""``ditorch generate``: stock and --dlinfer greedy generation print the same token ids; bad input, one line."""

from __future__ import annotations

import re

import pytest

from ditorch import cli, generate

GENERATED = re.compile(r"^generated (\d+): ids \[([\d, ]*)\]$", re.MULTILINE)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = cli.main(["generate", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _ids(out: str) -> dict[int, list[int]]:
    return {int(i): [int(t) for t in ids.split(", ") if t] for i, ids in GENERATED.findall(out)}


def test_dlinfer_generates_the_same_ids_as_stock(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--model", "llama", "--prompt", "Hello", "--prompt", "Hi there, you", "--max-new-tokens", "6",
            "--block-size", "4"]
    status, stock, err = _run(capsys, *args)
    assert status == 0, err
    status, dl, err = _run(capsys, *args, "--dlinfer")
    assert status == 0, err
    ids = _ids(stock)
    assert sorted(ids) == [0, 1] and all(len(row) == 6 for row in ids.values()), stock
    assert _ids(dl) == ids
    assert "prompt 0: 'Hello' ids [72, 101, 108, 108, 111]" in stock
    assert re.search(r"^tokens/s: [\d.]+ \(12 new tokens in ", stock, re.MULTILINE), stock
    counts = dict(re.findall(r"(\w+)=(\d+)", next(line for line in dl.splitlines() if line.startswith("dlinfer ops:"))))
    # 6 steps x 2 layers: prefill once per layer, then 5 decode steps
    assert counts["prefill_attention"] == "2" and counts["paged_decode_attention"] == "10", dl
    assert "dlinfer ops" not in stock


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "no_such_model", "--prompt", "x"], "--model 'no_such_model': neither a tiny model family"),
    (["--model", "internvl", "--prompt", "x"], "--model 'internvl': a vision family"),
    (["--model", "llama", "--prompt", ""], "--prompt: an empty prompt"),
    (["--model", "deepseek_v3", "--prompt", "x", "--dlinfer"], "--dlinfer: deepseek_v3 uses multi-head"),
])
def test_bad_input_one_clear_line(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    status, out, err = _run(capsys, *args, "--max-new-tokens", "1")
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"ditorch generate: error: {message}"), err


def test_directory_without_a_model_is_named(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _run(capsys, "--model", str(tmp_path), "--prompt", "x")
    assert status == 2 and err.startswith(f"ditorch generate: error: --model {str(tmp_path)!r}: cannot load"), err


def test_byte_level_tokens() -> None:
    assert generate.encode("hé") == [104, 195, 169]
    assert generate.decode([104, 195 + 256, 169]) == "hé"


def test_benchmark_quick_writes_json(tmp_path) -> None:
    """benchmarks/bench_dlinfer.py --quick: the project's JSON format, prefill and decode rows, same tokens."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_dlinfer.py"
    out = tmp_path / "dlinfer.json"
    proc = subprocess.run([sys.executable, str(script), "--quick", "--families", "llama", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["name"] == "dlinfer_generate_tokens_per_s" and report["unit"] == "tokens/s"
    assert [r["case"] for r in report["results"]] == ["llama_prefill", "llama_decode"]
    for row in report["results"]:
        assert row["value"] > 0 and row["baseline"] > 0
        assert row["ratio"] == pytest.approx(row["baseline"] / row["value"], rel=1e-2)
        assert row["paired_ratio"] == pytest.approx(row["dlinfer_s"][0] / row["stock_s"][0], rel=2e-2)  # one round
        assert row["same_tokens"] is True
    assert report["env"]["torch"] and report["env"]["new_tokens"] == 4 and report["env"]["device"] == "cpu"
    bad = subprocess.run([sys.executable, str(script), "--quick", "--device", "tpu", "--out", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--device 'tpu'" in bad.stderr
