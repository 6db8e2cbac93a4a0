"""ModuleDump (the module-level dump of a training run) and its reader."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import torch_dipu  # noqa: F401  (registers the dipu device)
from diopi.steps import StepRange
from module_tools import DumpError, ModuleDump, dump_from_env, load_dump
from module_tools.config import dump_config

DEVICES = ["cpu", "dipu"]


class Shared(torch.nn.Module):
    """Four linear layers; ``mid`` is called twice per forward."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(6, 16)
        self.mid = torch.nn.Linear(16, 16)
        self.mid2 = torch.nn.Linear(16, 16)
        self.out = torch.nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        h = torch.relu(self.mid(h))
        h = torch.relu(self.mid2(h))
        h = torch.relu(self.mid(h))
        return self.out(h)


class Tied(torch.nn.Module):
    """An embedding whose weight the output projection shares; the forward returns a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(20, 8)
        self.head = torch.nn.Linear(8, 20, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> dict[str, torch.Tensor | None]:
        return {"logits": self.head(torch.tanh(self.embed(ids))), "past": None}


def _train(model: torch.nn.Module, device: str, steps: int = 2, dump: ModuleDump | None = None) -> list[torch.Tensor]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(5, 6, generator=gen).to(device)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if dump is not None:
            dump.step()
        losses.append(loss.detach().cpu())
    return losses


def _model(device: str) -> Shared:
    torch.manual_seed(0)
    return Shared().to(device)


def _order(entries: list[dict], step: int = 1) -> list[tuple[str, int]]:
    return [(e["module"], e["call"]) for e in entries if e["step"] == step]


@pytest.mark.parametrize("device", DEVICES)
def test_order_calls_values_and_training_unchanged(tmp_path: Path, device: str) -> None:
    plain = _model(device)
    want = _train(plain, device)
    model = _model(device)
    with ModuleDump(model, tmp_path) as dump:
        got = _train(model, device, dump=dump)
        grads = {}
        x = torch.randn(5, 6).to(device)
        model(x).square().mean().backward()  # step 3: read the gradients after backward
        grads = {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters()}
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))  # bitwise the same training
    for p, q in zip(plain.parameters(), model.parameters(), strict=True):
        assert torch.equal(p.detach().cpu(), q.detach().cpu())
    d = load_dump(tmp_path)
    assert d.index["steps"] == [1, 2, 3] and d.modules["mid"] == "Linear" and d.index["root"] == "Shared"
    assert _order(d.forward) == [("", 0), ("inp", 0), ("mid", 0), ("mid2", 0), ("mid", 1), ("out", 0)]
    assert _order(d.backward) == [("out", 0), ("mid", 1), ("mid2", 0), ("mid", 0), ("inp", 0), ("", 0)]
    # full values and statistics agree; the second call of mid sees mid2's output
    fwd = {(e["module"], e["call"]): e for e in d.forward if e["step"] == 1}
    mid1 = d.tensors(fwd[("mid", 1)])
    assert torch.equal(mid1["input.0"], torch.relu(d.tensors(fwd[("mid2", 0)])["output.0"]))
    for name, t in mid1.items():
        s = fwd[("mid", 1)]["tensors"][name]
        assert s["shape"] == list(t.shape) and s["dtype"] == "float32" and s["nan"] == 0
        assert s["max"] == pytest.approx(float(t.max())) and s["norm"] == pytest.approx(float(t.norm()), rel=1e-6)
    assert fwd[("mid", 1)]["dir"] == "mid/step1-call1/forward"
    # grad_param equals p.grad (mid's gradient sums both calls and sits on its last finished backward entry)
    last = {}
    for e in d.backward:
        if e["step"] == 3:
            last[e["module"]] = e
    assert last["mid"]["call"] == 0
    for name, grad in grads.items():
        module, pname = name.rsplit(".", 1)
        assert torch.equal(d.tensors(last[module])[f"grad_param.{pname}"], grad)
    # grad_input is the part of the input's gradient that flows through this call: grad_output @ weight
    weight = {n: p.detach().cpu() for n, p in model.named_parameters()}
    by_call = {(e["module"], e["call"]): d.tensors(e) for e in d.backward if e["step"] == 3}
    for module, call in (("out", 0), ("mid", 1), ("mid", 0)):
        t = by_call[(module, call)]
        assert torch.equal(t["grad_input.0"], t["grad_output.0"] @ weight[f"{module}.weight"])
    assert "grad_input.0" not in by_call[("inp", 0)]  # x needs no gradient


def test_dump_is_a_copy_at_hook_time(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    x = torch.ones(2, 4)
    with ModuleDump(model, tmp_path):
        y = model(x)
        x.add_(5)  # in-place changes after the call must not reach the dump
        y.data.mul_(0)
    d = load_dump(tmp_path)
    t = d.tensors(d.forward[1])
    assert torch.equal(t["input.0"], torch.ones(2, 4)) and t["output.0"].abs().sum() > 0


@pytest.mark.parametrize("device", DEVICES)
def test_tied_parameter_under_both_owners_and_dict_output(tmp_path: Path, device: str) -> None:
    torch.manual_seed(0)
    model = Tied().to(device)
    with ModuleDump(model, tmp_path):
        out = model(torch.tensor([[1, 2, 3], [4, 5, 6]]).to(device))
        out["logits"].square().mean().backward()
    d = load_dump(tmp_path)
    grad = model.embed.weight.grad.detach().cpu()
    by_module = {e["module"]: e for e in d.backward}
    assert torch.equal(d.tensors(by_module["embed"])["grad_param.weight"], grad)
    assert torch.equal(d.tensors(by_module["head"])["grad_param.weight"], grad)
    root = next(e for e in d.forward if e["module"] == "")
    assert list(root["tensors"]) == ["input.0", "output.0"]  # the dict's tensor; None skipped
    assert root["tensors"]["input.0"] == {"dtype": "int64", "shape": [2, 3], "numel": 6}


def test_stats_only_and_steps(tmp_path: Path) -> None:
    model = _model("cpu")
    with ModuleDump(model, tmp_path, stats_only=True, steps=range(2, 3)) as dump:
        _train(model, "cpu", steps=3, dump=dump)
    d = load_dump(tmp_path / "rank0")
    assert d.stats_only and d.index["steps"] == [2]
    assert {e["step"] for e in d.forward + d.backward} == {2}
    assert all(e["dir"] is None for e in d.forward + d.backward)
    assert not list(tmp_path.rglob("*.safetensors"))
    assert d.backward[0]["tensors"]["grad_param.weight"]["norm"] > 0
    with pytest.raises(DumpError, match="statistics-only"):
        d.tensors(d.forward[0])


class TwoPaths(torch.nn.Module):
    """Its input reaches the output by two nodes of one call: the input's gradient is the sum of two parts."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * x + x.sin()


def _stats_run(device: str, stats_only: bool, out: Path) -> tuple[list[torch.Tensor], dict]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(Shared(), torch.nn.Linear(3, 6), TwoPaths()).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    with ModuleDump(model, out, stats_only=stats_only) as dump:
        for _ in range(2):
            x = torch.randn(5, 6, generator=gen).to(device).requires_grad_()
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            dump.step()
    return [p.detach().cpu() for p in model.parameters()], load_dump(out).index


@pytest.mark.parametrize("device", DEVICES)
def test_stats_only_matches_float64_statistics_of_the_full_dump(tmp_path: Path, device: str) -> None:
    from diopi.compare import Verdict
    from module_tools.compare import compare_stats
    from op_tools.tensor_stats import tensor_stats

    plain = _model(device)
    want = _train(plain, device)
    params, stats = _stats_run(device, True, tmp_path / "stats")
    full_params, _ = _stats_run(device, False, tmp_path / "full")
    assert all(torch.equal(a, b) for a, b in zip(params, full_params, strict=True))  # training bitwise unchanged
    model = _model(device)
    with ModuleDump(model, tmp_path / "shared", stats_only=True) as dump:
        got = _train(model, device, dump=dump)
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    assert all(torch.equal(p.detach().cpu(), q.detach().cpu())
               for p, q in zip(plain.parameters(), model.parameters(), strict=True))
    full = load_dump(tmp_path / "full")
    checked = 0
    for direction in ("forward", "backward"):
        assert [(e["module"], e["step"], e["call"]) for e in stats[direction]] == \
            [(e["module"], e["step"], e["call"]) for e in full.index[direction]]
        for entry, ref in zip(stats[direction], full.index[direction], strict=True):
            tensors = full.tensors(ref)
            assert list(entry["tensors"]) == list(tensors)
            for name, t in tensors.items():
                got_stats = entry["tensors"][name]
                assert got_stats["shape"] == list(t.shape) and got_stats["dtype"] == "float32"
                wide = {"dtype": "float32", "shape": list(t.shape), **tensor_stats(t.double())}
                result = compare_stats(name, got_stats, wide)
                assert result.verdict == Verdict.PASS, (entry["module"], name, result.message)
                checked += 1
    assert checked > 100
    # TwoPaths' grad_input.0 is the sum of both parts: the gradient of its input, replayed on the host
    fwd = full.tensors(next(e for e in full.forward if e["module"] == "2.lin" and e["step"] == 2))
    bwd = full.tensors(next(e for e in full.backward if e["module"] == "2" and e["step"] == 2))
    lin = torch.nn.Linear(6, 6)
    with torch.no_grad():
        lin.weight.copy_(fwd["param.weight"])
        lin.bias.copy_(fwd["param.bias"])
    h = fwd["input.0"].clone().requires_grad_()
    (lin(h) * h + h.sin()).backward(bwd["grad_output.0"])
    from diopi.compare import compare_tensors
    assert compare_tensors(bwd["grad_input.0"], h.grad, path="grad_input.0").verdict == Verdict.PASS


@pytest.mark.parametrize("device", DEVICES)
def test_stats_only_is_taken_at_hook_time_and_counts_nan_inf(tmp_path: Path, device: str) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4)).to(device)
    x = torch.ones(2, 4).to(device)
    x[0, 0], x[1, 1], x[1, 2] = float("nan"), float("inf"), -float("inf")
    with ModuleDump(model, tmp_path, stats_only=True):
        y = model(x)
        x.fill_(7)  # in-place changes after the call must not reach the statistics
        y.data.mul_(0)
    d = load_dump(tmp_path)
    stats = d.forward[1]["tensors"]
    assert stats["input.0"] == {**stats["input.0"], "nan": 1, "inf": 2, "min": 1.0, "max": 1.0, "mean": 1.0,
                                "norm": pytest.approx(5 ** 0.5), "numel": 8, "dtype": "float32", "shape": [2, 4]}
    assert stats["output.0"]["nan"] + stats["output.0"]["inf"] == 8 and stats["output.0"]["min"] is None
    assert stats["param.weight"]["nan"] == 0 and stats["param.weight"]["norm"] > 0


class TwoOut(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2, x * 3


@pytest.mark.parametrize("stats_only", [False, True])
def test_backward_with_an_unused_output_is_recorded(tmp_path: Path, stats_only: bool) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), TwoOut())
    with ModuleDump(model, tmp_path, stats_only=stats_only):
        model(torch.ones(2, 4))[0].sum().backward()  # output.1 gets no gradient: finished at the step's end
    entry = next(e for e in load_dump(tmp_path).backward if e["module"] == "1")
    assert list(entry["tensors"]) == ["grad_input.0", "grad_output.0"]
    assert entry["tensors"]["grad_output.0"]["min"] == 1.0 and entry["tensors"]["grad_input.0"]["max"] == 2.0


def test_damaged_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(DumpError, match="no module dump"):
        load_dump(tmp_path)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with ModuleDump(model, tmp_path):
        model(torch.ones(1, 2))
    index = tmp_path / "rank0" / "index.json"
    d = load_dump(tmp_path)
    tensor_file = tmp_path / "rank0" / d.forward[1]["dir"] / "tensors.safetensors"
    tensor_file.write_bytes(b"garbage")
    with pytest.raises(DumpError, match=str(tensor_file)):
        d.tensors(d.forward[1])
    tensor_file.unlink()
    with pytest.raises(DumpError, match="missing"):
        d.tensors(d.forward[1])
    index.write_text(index.read_text()[:40])
    with pytest.raises(DumpError, match=str(index)):
        load_dump(tmp_path)
    index.write_text(json.dumps({"format": "other"}))
    with pytest.raises(DumpError, match="not a module dump index"):
        load_dump(tmp_path)


@pytest.mark.parametrize("device", DEVICES)
def test_llama(tmp_path: Path, device: str) -> None:
    from ditorch.models import get_family

    family = get_family("llama")

    def run(dump_dir: Path | None) -> tuple[list[torch.Tensor], torch.nn.Module]:
        model = family.build().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        dump = ModuleDump(model, dump_dir, stats_only=False).start() if dump_dir else None
        losses = []
        for step in range(2):
            loss = model(**family.batch(step, device=device, batch_size=1, seq_len=8)).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach().cpu())
            if dump:
                dump.step()
        if dump:
            dump.stop()
        return losses, model

    want, _ = run(None)
    got, model = run(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    d = load_dump(tmp_path)
    fwd = _order(d.forward)
    assert fwd[:3] == [("", 0), ("model", 0), ("model.embed_tokens", 0)]
    assert ("model.layers.1.mlp.down_proj", 0) in fwd and ("lm_head", 0) in fwd
    bwd = [m for m, _ in _order(d.backward)]
    assert bwd.index("lm_head") < bwd.index("model.layers.1.mlp") < bwd.index("model.layers.0.mlp")
    emb = next(e for e in d.backward if e["module"] == "model.embed_tokens" and e["step"] == 2)
    assert "grad_param.weight" in emb["tensors"]
    assert d.index["device"].startswith(device) and d.modules["model.layers.0"] == "LlamaDecoderLayer"


def test_steps_and_config() -> None:
    assert 1 in StepRange(None) and 99 in StepRange(None)
    s = StepRange("1-3,6-")
    assert [i for i in range(9) if i in s] == [1, 2, 3, 6, 7, 8] and not s.done_after(9)
    assert [i for i in range(5) if i in StepRange([1, 3])] == [1, 3] and StepRange([1, 3]).done_after(3)
    for bad in ("x", "3-1", "1 2", "0"):
        with pytest.raises(ValueError, match="MODULE_DUMP_STEPS"):
            StepRange(bad, "MODULE_DUMP_STEPS")
    cfg = dump_config({"MODULE_DUMP_DIR": "/x", "MODULE_DUMP_STATS_ONLY": "1", "MODULE_DUMP_STEPS": "2"})
    assert cfg.out_dir == "/x" and cfg.stats_only and 2 in cfg.steps and 1 not in cfg.steps
    assert dump_config({}).out_dir is None
    with pytest.raises(ValueError, match="MODULE_DUMP_STATS_ONLY"):
        dump_config({"MODULE_DUMP_STATS_ONLY": "maybe"})


def test_dump_from_env_off() -> None:
    if "MODULE_DUMP_DIR" in os.environ:
        pytest.skip("MODULE_DUMP_DIR is set for the test run")
    assert dump_from_env(torch.nn.Linear(1, 1)) is None


def test_env_form_in_a_script(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import torch, torch_dipu, module_tools
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1)).to("dipu")
        module_tools.dump_from_env(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            model(torch.randn(2, 3).to("dipu")).sum().backward()
            opt.step()
            opt.zero_grad()
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIPU_", "DROPLET_", "MODULE_DUMP_"))}
    env.update(MODULE_DUMP_DIR=str(tmp_path), MODULE_DUMP_STATS_ONLY="1", MODULE_DUMP_STEPS="1-2")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    d = load_dump(tmp_path)
    assert d.stats_only and d.index["steps"] == [1, 2] and d.index["device"] == "dipu:0"
    assert _order(d.forward, 1) == [("", 0), ("0", 0), ("1", 0), ("2", 0)]
    assert [m for m, _ in _order(d.backward, 2)] == ["2", "1", "0", ""]  # inner calls first, the root last


@dataclasses.dataclass
class _Out:
    value: torch.Tensor
    note: str = "x"


class Odd(torch.nn.Module):
    """Submodules returning None, a dataclass and a tuple with a non-tensor; an in-place ReLU on an output."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.act = torch.nn.ReLU(inplace=True)
        self.nothing = torch.nn.Identity()
        self.wrap = torch.nn.ModuleDict({"a": torch.nn.Linear(4, 4)})

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        h = self.act(self.lin(x))
        assert self.nothing(None) is None
        out = _Out(self.wrap["a"](h))
        return out.value.sum(), 3


@pytest.mark.parametrize("stats_only", [False, True])
def test_odd_outputs_and_no_grad(tmp_path: Path, stats_only: bool) -> None:
    torch.manual_seed(0)
    model = Odd()
    x = torch.randn(2, 4)
    want = torch.autograd.grad(model(x)[0], list(model.parameters()))
    with ModuleDump(model, tmp_path, stats_only=stats_only):
        got = torch.autograd.grad(model(x)[0], list(model.parameters()))
        with torch.no_grad():
            model(x)
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    d = load_dump(tmp_path)
    calls = _order(d.forward)
    assert calls.count(("", 0)) == 1 and ("", 1) in calls and ("nothing", 0) in calls
    nothing = next(e for e in d.forward if e["module"] == "nothing")
    assert nothing["tensors"] == {}
    root = next(e for e in d.forward if e["module"] == "")
    assert list(root["tensors"]) == ["input.0", "output.0"]
    assert [m for m, _ in _order(d.backward)] == ["wrap.a", "act", "lin", ""]
    assert "grad_input.0" in next(e for e in d.backward if e["module"] == "act")["tensors"]


def test_dump_modules_command(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
        loss_fn = torch.nn.MSELoss()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(int(sys.argv[1])):
            loss_fn(model(torch.randn(2, 3)), torch.zeros(2, 1)).backward()
            opt.step()
            opt.zero_grad()
        sys.exit(3)
    """))
    out = tmp_path / "dump"
    code = (f"from module_tools.dump_command import main; "
            f"raise SystemExit(main(['--out', {str(out)!r}, '--steps', '2-', '--', {str(script)!r}, '2']))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODULE_DUMP_")}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "dumped Sequential" in proc.stderr
    d = load_dump(out)
    assert d.root == "Sequential" and d.steps == [2]
    assert _order(d.forward, 2) == [("", 0), ("0", 0), ("1", 0), ("2", 0)]
