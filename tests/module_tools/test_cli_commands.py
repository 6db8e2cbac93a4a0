"""``ditorch dump-modules`` and ``ditorch compare-runs`` wired into the ditorch command line."""

from __future__ import annotations

import json
import textwrap

from ditorch import cli

SCRIPT = textwrap.dedent("""
    import sys
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    scale = float(sys.argv[1])
    for _ in range(2):
        loss = (model(x) * scale).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
""")


def test_dump_modules_then_compare_runs(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    for name, scale in (("ref", "1.0"), ("same", "1.0"), ("other", "1.5")):
        assert cli.main(["dump-modules", "--out", str(tmp_path / name), "--", str(script), scale]) == 0
    index = json.loads((tmp_path / "ref" / "rank0" / "index.json").read_text())
    assert index["steps"] == [1, 2] and {e["module"] for e in index["forward"]} == {"", "0", "1", "2"}
    capsys.readouterr()
    assert cli.main(["compare-runs", str(tmp_path / "ref"), str(tmp_path / "same")]) == 0
    assert "no divergence in 2 steps" in capsys.readouterr().out
    report = tmp_path / "report.json"
    assert cli.main(["compare-runs", str(tmp_path / "ref"), str(tmp_path / "other"), "--json", str(report)]) == 1
    divergence = json.loads(report.read_text())["first_divergence"]
    # the scale is applied after the model: the gradients part in step 1, the parameters (so the forward) in step 2
    assert (divergence["backward"]["step"], divergence["backward"]["tensor"]) == (1, "grad_output.0")
    assert (divergence["forward"]["step"], divergence["forward"]["tensor"]) == (2, "param.weight")
    assert cli.main(["compare-runs", str(tmp_path / "ref"), str(tmp_path / "missing")]) == 2


def test_dump_modules_fixed_input_and_stop_after(tmp_path, capsys):
    """``--fixed-input``: the 'other' run (its loss scaled after the model) replayed on the reference: every module
    is clean on its own; ``--stop-after 1`` ends the script after one step."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    assert cli.main(["dump-modules", "--out", str(tmp_path / "ref"), "--", str(script), "1.0"]) == 0
    assert cli.main(["dump-modules", "--out", str(tmp_path / "other"), "--fixed-input", str(tmp_path / "ref"),
                     "--stop-after", "1", "--", str(script), "1.5"]) == 0
    index = json.loads((tmp_path / "other" / "rank0" / "index.json").read_text())
    assert index["steps"] == [1] and index["fixed_input"]["failed"] == []
    capsys.readouterr()
    assert cli.main(["compare-runs", str(tmp_path / "ref"), str(tmp_path / "other")]) == 1
    out = capsys.readouterr().out
    assert "fixed input (" in out and "every module is clean on its own" in out
