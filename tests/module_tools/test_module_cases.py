"""A full module dump writes each forward call as a case that ``ditorch replay`` replays (op_tools.module_case)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import torch_dipu  # noqa: F401  (registers the dipu device)
from diopi import case_format as cf
from module_tools import ModuleDump
from op_tools.module_case import rebuild_module
from op_tools.replay import ReplayOptions, replay_case, replay_dir

SCRIPT = """
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.LayerNorm(4), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        model(torch.randn(2, 3)).square().mean().backward()
        opt.step()
        opt.zero_grad()
"""


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MODULE_DUMP_", "DROPLET_", "OP_TOOLS_"))}
    return subprocess.run([sys.executable, "-m", "ditorch", *args], env={**base, **(env or {})}, capture_output=True,
                          text=True, timeout=300)


def test_dump_modules_then_replay_finds_a_faulty_kernel(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    dump = tmp_path / "dump"
    proc = _run(["dump-modules", "--out", str(dump), "--steps", "2", "--", str(script)])
    assert proc.returncode == 0, proc.stderr
    cases = sorted(p.parent for p in (dump / "rank0").rglob(cf.CASE_FILE))
    assert [c.relative_to(dump / "rank0").as_posix() for c in cases] == [
        f"{m}/step2-call0/forward" for m in ("0", "1", "2", "3", "_root")]
    record = cf.load_case(cases[0]).record
    assert record["tool"] == "ModuleDump" and record["op"] == "torch.nn.modules.linear.Linear"
    assert record["module"]["path"] == "0" and record["step"] == 2
    clean = _run(["replay", str(dump), "--device", "dipu", "--results-dir", str(tmp_path / "r1")])
    assert clean.returncode == 0, clean.stdout + clean.stderr
    # one Linear call alone replays with droplet's faulty linear kernel: FAIL, named; the Tanh still passes
    for case, want in ((cases[0], "FAIL"), (cases[1], "PASS")):
        faulty = _run(["replay", str(case), "--device", "dipu", "--results-dir", str(tmp_path / "r2")],
                      env={"DROPLET_FAULTS": "linear:bias:0.5"})
        assert faulty.returncode == (1 if want == "FAIL" else 0), faulty.stdout + faulty.stderr
        assert want == "PASS" or "FAIL" in faulty.stdout + faulty.stderr


class Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.block = torch.nn.Linear(4, 4)
        self.again = self.block  # the same submodule under two names
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.tensor(2.0), persistent=False)
        self.act = torch.nn.functional.gelu
        self.sizes = {1: "one", "two": (2, 2.5)}

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.again(self.act(self.block(self.embed(ids)))) * self.scale)


def test_rebuilt_module_keeps_ties_buffers_and_attributes(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Tied()
    ids = torch.tensor([[1, 2, 3]])
    with ModuleDump(model, tmp_path):
        want = model(ids)
    root = tmp_path / "rank0" / "_root" / "step1-call0" / "forward"
    with pytest.raises(LookupError, match="--allow_module test_module_cases"):
        rebuild_module(cf.load_case(root))
    rebuilt = rebuild_module(cf.load_case(root), allowed_modules=(__name__,))
    assert rebuilt.head.weight is rebuilt.embed.weight and rebuilt.again is rebuilt.block
    assert rebuilt.act is torch.nn.functional.gelu and rebuilt.sizes == {1: "one", "two": (2, 2.5)}
    assert "scale" in rebuilt._non_persistent_buffers_set and "scale" not in rebuilt.state_dict()
    assert torch.equal(rebuilt(ids), want)
    replayed = replay_dir(tmp_path, ReplayOptions(allow_modules=(__name__,)))
    results = {Path(r.path).parent.parent.name: r for r in replayed}
    assert results["_root"].status == "PASS" and results["_root"].bitwise_forward


def test_a_call_that_draws_random_numbers_is_not_judged_by_value(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    with ModuleDump(model, tmp_path):
        model(torch.ones(3, 4))
    dropout = tmp_path / "rank0" / "1" / "step1-call0" / "forward"
    assert cf.load_case(dropout).record["random"] is True
    assert cf.load_case(tmp_path / "rank0" / "0" / "step1-call0" / "forward").record["random"] is False
    result = replay_case(dropout)
    assert result.status == "PASS" and result.forward == "SKIP (random)"


def test_a_transformers_layer_replays_with_its_package_allowed(tmp_path: Path) -> None:
    from ditorch.models import get_family

    family = get_family("llama")
    model = family.build()
    with ModuleDump(model, tmp_path):
        model(**family.batch(0, device="cpu", batch_size=1, seq_len=8)).loss.backward()
    mlp = tmp_path / "rank0" / "model.layers.0.mlp" / "step1-call0" / "forward"
    refused = replay_case(mlp)
    assert refused.status == "ERROR" and "--allow_module transformers" in refused.message
    result = replay_case(mlp, ReplayOptions(allow_modules=("transformers",), device="dipu"))
    assert result.status == "PASS" and result.forward == "PASS", result.message
    norm = replay_case(tmp_path / "rank0" / "model.norm" / "step1-call0" / "forward",
                       ReplayOptions(allow_modules=("transformers",)))
    assert norm.status == "PASS" and norm.bitwise_forward
