"""compare_runs / ditorch compare-runs: align two module dumps and name the first divergence."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import torch

import torch_dipu  # noqa: F401  (registers the dipu device)
from module_tools import ModuleDump
from module_tools.compare import compare_runs
from module_tools.compare_command import main as compare_main
from torch_dipu.vendors import droplet


class MLP(torch.nn.Module):
    """Four blocks (Linear + activation; block 2 uses Tanh, the others ReLU). ``faults`` (a DROPLET_FAULTS
    string) is switched on during block ``fault_layer``'s forward only."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh() if i == 2 else torch.nn.ReLU())
            for i in range(4))
        self.fault_layer: int | None = None
        self.faults = ""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            switch = droplet.switches(faults=self.faults) if i == self.fault_layer else contextlib.nullcontext()
            with switch:
                x = layer(x)
        return x


class Twice(torch.nn.Module):
    """``mid`` is called twice per forward; ``faults`` is on during its second call only."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(6, 8)
        self.mid = torch.nn.Linear(8, 8)
        self.out = torch.nn.Linear(8, 3)
        self.faults = ""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.mid(torch.relu(self.inp(x))))
        with droplet.switches(faults=self.faults) if self.faults else contextlib.nullcontext():
            h = torch.relu(self.mid(h))
        return self.out(h)


class TiedLM(torch.nn.Module):
    def __init__(self, tied: bool) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 8)
        self.head = torch.nn.Linear(8, 10, bias=False)
        if tied:
            self.head.weight = self.emb.weight
        else:
            self.head.weight = torch.nn.Parameter(self.emb.weight.detach().clone())

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.emb(ids)))


class Wrapper(torch.nn.Module):
    """A DDP-style wrapper: the model is its child ``module``."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.module(*args)


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(2, 4, 3)
        self.norm = torch.nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x))


def dump_run(model: torch.nn.Module, x: torch.Tensor, out: Path, device: str = "cpu", steps: int = 1,
             faults: str = "", stats_only: bool = False, fixed_input: Path | None = None) -> Path:
    """Train ``model`` (seeded copy) for ``steps`` SGD steps on ``device`` under a ModuleDump; ``faults`` is on for
    the whole run (forward and backward); ``fixed_input``: the reference dump to replay each call on."""
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with droplet.switches(faults=faults), ModuleDump(model, out, stats_only=stats_only,
                                                     fixed_input=fixed_input) as dump:
        for _ in range(steps):
            opt.zero_grad()
            out_t = model(x.to(device))
            out_t.float().pow(2).mean().backward()
            opt.step()
            dump.step()
    return out


def seeded(factory, *args):  # noqa: ANN001, ANN201
    torch.manual_seed(0)
    return factory(*args)


X = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))


def test_clean_dipu_vs_cpu_no_divergence_with_json_and_html(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ref = dump_run(seeded(MLP), X, tmp_path / "ref", steps=2)
    test = dump_run(seeded(MLP), X, tmp_path / "test", device="dipu", steps=2)
    result = compare_runs(ref, test)
    assert result.first_divergence == {"forward": None, "backward": None}
    assert result.summary() == "no divergence in 2 steps"
    assert len(result.forward) == 2 * 13  # root + 4 blocks of 2 modules each, per step
    rc = compare_main([str(ref), str(test), "--json", str(tmp_path / "c.json"), "--html", str(tmp_path / "c.html")])
    assert rc == 0
    assert "no divergence in 2 steps" in capsys.readouterr().out
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["first_divergence"] == {"forward": None, "backward": None}
    assert data["forward"][1]["module"] == "layers.0" and data["forward"][1]["verdict"] == "PASS"
    page = (tmp_path / "c.html").read_text()
    assert "<details" in page and "layers.2.1" in page and "http" not in page


def test_forward_fault_in_one_layer(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ref = dump_run(seeded(MLP), X, tmp_path / "ref")
    model = seeded(MLP)
    model.fault_layer, model.faults = 2, "linear:bias:0.5"
    test = dump_run(model, X, tmp_path / "test", device="dipu")
    result = compare_runs(ref, test)
    fwd = result.first_divergence["forward"]
    assert fwd is not None
    assert (fwd["module"], fwd["class"], fwd["step"], fwd["call"], fwd["tensor"], fwd["verdict"]) == \
        ("layers.2.0", "Linear", 1, 0, "output.0", "FAIL")
    assert fwd["max_abs_diff"] == pytest.approx(0.5, rel=1e-4) and fwd["cosine"] < 1
    # earlier layers are clean
    assert all(e.verdict.value == "PASS" for e in result.forward if e.module.startswith(("layers.0", "layers.1")))
    rc = compare_main([str(ref), str(test), "--json", str(tmp_path / "c.json")])
    assert rc == 1
    assert "first divergence (forward): step 1, module 'layers.2.0' (Linear) call 0, tensor output.0" in \
        capsys.readouterr().out
    assert json.loads((tmp_path / "c.json").read_text())["first_divergence"]["forward"]["module"] == "layers.2.0"


def test_backward_only_fault_in_one_layer(tmp_path: Path) -> None:
    ref = dump_run(seeded(MLP), X, tmp_path / "ref")
    test = dump_run(seeded(MLP), X, tmp_path / "test", device="dipu", faults="tanh_backward:grad:3")
    first = compare_runs(ref, test).first_divergence
    assert first["forward"] is None
    bwd = first["backward"]
    assert bwd is not None
    assert (bwd["module"], bwd["class"], bwd["direction"], bwd["tensor"]) == \
        ("layers.2.1", "Tanh", "backward", "grad_input.0")


def test_fault_in_second_call_only(tmp_path: Path) -> None:
    x = torch.randn(3, 6, generator=torch.Generator().manual_seed(2))
    ref = dump_run(seeded(Twice), x, tmp_path / "ref")
    model = seeded(Twice)
    model.faults = "linear:bias:0.5"
    test = dump_run(model, x, tmp_path / "test", device="dipu")
    result = compare_runs(ref, test)
    calls = [(e.call, e.verdict.value) for e in result.forward if e.module == "mid"]
    assert calls == [(0, "PASS"), (1, "FAIL")]
    fwd = result.first_divergence["forward"]
    assert (fwd["module"], fwd["call"], fwd["tensor"]) == ("mid", 1, "output.0")


def test_untied_embedding_names_the_parameter_gradient(tmp_path: Path) -> None:
    ids = torch.tensor([[1, 2, 3, 2]])
    ref = dump_run(seeded(TiedLM, True), ids, tmp_path / "ref")
    test = dump_run(seeded(TiedLM, False), ids, tmp_path / "test", device="dipu")
    result = compare_runs(ref, test)
    assert result.first_divergence["forward"] is None  # every op is right
    bwd = result.first_divergence["backward"]
    assert bwd is not None and bwd["tensor"] == "grad_param.weight" and bwd["module"] in ("head", "emb")
    failed = {(e.module, n) for e in result.backward for n, r in e.tensors.items() if r.verdict.value == "FAIL"}
    assert failed == {("head", "grad_param.weight"), ("emb", "grad_param.weight")}


def test_ddp_style_prefix_aligns_every_module(tmp_path: Path) -> None:
    ref = dump_run(seeded(MLP), X, tmp_path / "ref")
    test = dump_run(Wrapper(seeded(MLP)), X, tmp_path / "test", device="dipu")
    result = compare_runs(ref, test)
    a = result.alignment
    assert a.unaligned_ref == [] and a.unaligned_test == [] and a.wrappers_test == [""]
    assert a.pairs["module.layers.2.1"] == ("layers.2.1", "wrapper")
    assert len(a.pairs) == 14 and not result.unmatched_entries
    assert result.summary() == "no divergence in 1 steps"


def test_renamed_module_aligns_by_class_and_order(tmp_path: Path) -> None:
    ref_dump = dump_run(seeded(Twice), torch.ones(2, 6), tmp_path / "ref")
    model = seeded(Twice)
    model.add_module("final", model.out)
    del model.out
    model.out = model.final  # attribute access still works; named_modules() sees "final" first
    result = compare_runs(ref_dump, dump_run(model, torch.ones(2, 6), tmp_path / "test"))
    assert result.alignment.pairs["final"] == ("out", "class-order")
    assert not result.diverged


def test_unrelated_models_nothing_aligns(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ref = dump_run(seeded(MLP), X, tmp_path / "ref")
    test = dump_run(seeded(ConvNet), torch.randn(2, 2, 5), tmp_path / "test")
    with pytest.raises(ValueError, match="nothing aligns") as info:
        compare_runs(ref, test)
    assert "closest candidates: <root> (MLP) ~" in str(info.value) and "conv (Conv1d)" in str(info.value)
    assert compare_main([str(ref), str(test)]) == 2
    assert "nothing aligns" in capsys.readouterr().err


def test_stats_only_dumps_compare_statistics(tmp_path: Path) -> None:
    ref = dump_run(seeded(MLP), X, tmp_path / "ref", stats_only=True)
    clean = dump_run(seeded(MLP), X, tmp_path / "clean", device="dipu", stats_only=True)
    assert compare_runs(ref, clean).summary() == "no divergence in 1 steps (statistics only)"
    model = seeded(MLP)
    model.fault_layer, model.faults = 1, "linear:bias:0.5"
    result = compare_runs(ref, dump_run(model, X, tmp_path / "test", device="dipu", stats_only=True))
    fwd = result.first_divergence["forward"]
    assert (fwd["module"], fwd["tensor"]) == ("layers.1.0", "output.0")
    assert "statistics" in fwd["message"] and result.stats_only


def test_damaged_dump_is_named(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ref = dump_run(seeded(MLP), X, tmp_path / "ref")
    (tmp_path / "bad" / "rank0").mkdir(parents=True)
    (tmp_path / "bad" / "rank0" / "index.json").write_text("{not json")
    assert compare_main([str(ref), str(tmp_path / "bad")]) == 2
    assert "index.json: damaged module dump index" in capsys.readouterr().err


def test_bf16_against_fp32_with_fp64_dump(tmp_path: Path) -> None:
    ref = dump_run(seeded(MLP), X, tmp_path / "ref")
    fp64 = dump_run(seeded(MLP).double(), X.double(), tmp_path / "fp64")
    test = dump_run(seeded(MLP).bfloat16(), X.bfloat16(), tmp_path / "test", device="dipu")
    result = compare_runs(ref, test, fp64=fp64)
    assert result.summary() == "no divergence in 1 steps"  # not flagged wholesale
    out = result.to_json()["forward"][-1]["tensors"]["output.0"]  # layers.3.1's output: bf16 rounding shows
    assert out["error_vs_fp64"] is not None and "compared as bfloat16" in out["message"]
    model = seeded(MLP).bfloat16()
    model.fault_layer, model.faults = 3, "linear:bias:0.5"
    faulty = dump_run(model, X.bfloat16(), tmp_path / "faulty", device="dipu")
    fwd = compare_runs(ref, faulty, fp64=fp64).first_divergence["forward"]
    assert (fwd["module"], fwd["tensor"]) == ("layers.3.0", "output.0")


class Scaled(torch.nn.Module):
    """Its own ``neg`` runs between its submodules ``pre`` and ``lin``."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = torch.nn.Linear(8, 8)
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(self.pre(x).neg())


@pytest.mark.parametrize(("faults", "direction", "tensor"), [("neg:bias:0.5", "forward", "input.0"),
                                                              ("neg:grad:3", "backward", "grad_output.0")])
def test_error_in_parent_code_names_the_parent(tmp_path: Path, faults: str, direction: str, tensor: str) -> None:
    ref = dump_run(seeded(Scaled), X, tmp_path / "ref")
    test = dump_run(seeded(Scaled), X, tmp_path / "test", device="dipu", faults=faults)
    first = compare_runs(ref, test).first_divergence[direction]
    expected_seen = "lin" if direction == "forward" else "pre"
    assert (first["module"], first["class"], first["tensor"], first["seen_in"]["module"]) == \
        ("", "Scaled", tensor, expected_seen)


def _fixed_verdicts(result, direction: str) -> dict[str, str]:  # noqa: ANN001
    return {e.module: e.verdict.value for e in result.fixed_input if e.direction == f"fixed_{direction}"}


def test_fixed_input_forward_fault_isolates_the_layer(tmp_path: Path) -> None:
    ref = dump_run(seeded(MLP), X, tmp_path / "ref", steps=2)
    model = seeded(MLP)
    model.fault_layer, model.faults = 2, "linear:bias:0.5"
    test = dump_run(model, X, tmp_path / "test", device="dipu", steps=2, fixed_input=ref)
    result = compare_runs(ref, test)
    # the ordinary comparison: layer 3 inherits the error
    assert {e.module for e in result.forward if e.verdict.value == "FAIL" and e.step == 1} >= {"layers.3.0",
                                                                                                "layers.3.1"}
    fixed = _fixed_verdicts(result, "forward")
    assert fixed["layers.3.0"] == fixed["layers.3.1"] == fixed["layers.1.0"] == "PASS"  # clean on their own
    assert fixed["layers.2.0"] == fixed["layers.2"] == fixed[""] == "FAIL"
    own = [(e.module, e.step, e.direction) for e in result.own_errors]
    # forward: the faulty Linear alone; backward: its block, whose forward replay is wrong (the Tanh's gradient
    # at a wrong pre-activation), flagged as such
    assert own == [("layers.2.0", 1, "fixed_forward"), ("layers.2.0", 2, "fixed_forward"),
                   ("layers.2", 1, "fixed_backward"), ("layers.2", 2, "fixed_backward")]
    assert [e["after_forward_error"] for e in result.to_json()["fixed_input"]["own_errors"]] == [False, False,
                                                                                                 True, True]
    assert "errors of their own in 'layers.2.0' (Linear) step 1 call 0 forward output.0" in result.summary()
    data = result.to_json()["fixed_input"]
    assert data["own_errors"][0]["module"] == "layers.2.0" and data["own_errors"][0]["tensor"] == "output.0"
    assert data["own_errors"][0]["max_abs_diff"] == pytest.approx(0.5, rel=1e-4)
    result.write_html(tmp_path / "c.html")
    assert "fixed-input forward" in (tmp_path / "c.html").read_text()


def test_fixed_input_backward_fault_isolates_the_layer(tmp_path: Path) -> None:
    ref = dump_run(seeded(MLP), X, tmp_path / "ref")
    test = dump_run(seeded(MLP), X, tmp_path / "test", device="dipu", faults="tanh_backward:grad:3", fixed_input=ref)
    result = compare_runs(ref, test)
    # the ordinary comparison: the layers before the Tanh get wrong gradients
    assert {e.module for e in result.backward if e.verdict.value == "FAIL"} >= {"layers.0.0", "layers.1.0"}
    fixed = _fixed_verdicts(result, "backward")
    assert fixed["layers.0.0"] == fixed["layers.1.0"] == fixed["layers.2.0"] == fixed["layers.3.0"] == "PASS"
    assert fixed["layers.2.1"] == "FAIL"
    assert set(_fixed_verdicts(result, "forward").values()) == {"PASS"}
    assert [(e.module, e.direction) for e in result.own_errors] == [("layers.2.1", "fixed_backward")]
    own = result.to_json()["fixed_input"]["own_errors"][0]
    assert (own["module"], own["direction"], own["tensor"]) == ("layers.2.1", "backward", "grad_input.0")


def test_fixed_input_clean_run_and_parameter_gradients(tmp_path: Path) -> None:
    ref = dump_run(seeded(MLP), X, tmp_path / "ref", steps=2)
    test = dump_run(seeded(MLP), X, tmp_path / "test", device="dipu", steps=2, fixed_input=ref)
    result = compare_runs(ref, test)
    assert result.summary().splitlines() == [
        "no divergence in 2 steps",
        "fixed input (48 replays of test calls on the reference inputs): every module is clean on its own"]  # 26 + 22
    linear = next(e for e in result.fixed_input if e.module == "layers.1.0" and e.direction == "fixed_backward")
    assert set(linear.tensors) == {"grad_input.0", "grad_param.weight", "grad_param.bias"}


def test_fixed_input_needs_a_full_reference(tmp_path: Path) -> None:
    from module_tools import DumpError

    ref = dump_run(seeded(MLP), X, tmp_path / "ref", stats_only=True)
    with pytest.raises(DumpError, match="statistics only"):
        ModuleDump(seeded(MLP), tmp_path / "test", fixed_input=ref).start()


def test_fixed_input_llama_with_cache_and_attention_weights(tmp_path: Path) -> None:
    """A transformers Llama (eager attention returning its weights, a KV cache passed through the layers) on dipu
    replayed on the CPU run's inputs: every replay runs and every module is clean on its own."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                         attn_implementation="eager")
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))

    def run(device: str, out: Path, fixed: Path | None = None) -> Path:
        model = seeded(LlamaForCausalLM, config).to(device)
        with ModuleDump(model, out, fixed_input=fixed) as dump:
            model(input_ids=ids.to(device), labels=ids.to(device)).loss.backward()
            dump.step()
        return out

    ref = run("cpu", tmp_path / "ref")
    result = compare_runs(ref, run("dipu", tmp_path / "test", ref))
    assert result.fixed_input_failures == []
    assert result.own_errors == []
    attn = [e for e in result.fixed_input if e.module == "model.layers.1.self_attn"]
    assert [e.direction for e in attn] == ["fixed_forward", "fixed_backward"]
    assert "grad_input.0" in attn[1].tensors and "output.1" in attn[0].tensors  # the attention weights too


class Flaky(torch.nn.Module):
    """A module whose forward fails on its second run (the replay), and a Linear after it."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)
        self.runs = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.runs += 1
        if self.runs % 2 == 0:
            raise RuntimeError("second run")
        return self.inner(x)


def test_fixed_input_replay_failure_is_reported(tmp_path: Path) -> None:
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(3))
    model = seeded(Flaky)
    ref = dump_run(model, x, tmp_path / "ref")
    model.runs = 0
    result = compare_runs(ref, dump_run(model, x, tmp_path / "test", fixed_input=ref))
    assert result.fixed_input_failures == [{"module": "", "step": 1, "call": 0, "error": "RuntimeError: second run"}]
    assert "1 calls could not be replayed (first: module '' step 1 call 0: RuntimeError: second run)" in \
        result.summary()
    assert {e.module for e in result.fixed_input} == {"inner"}


def test_real_ddp_wrapper_aligns_every_module(tmp_path: Path) -> None:
    """torch's DistributedDataParallel (one gloo process) around the model: every module aligns."""
    import torch.distributed as dist

    ref = dump_run(seeded(MLP), X, tmp_path / "ref")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        test = dump_run(torch.nn.parallel.DistributedDataParallel(seeded(MLP)), X, tmp_path / "test")
    finally:
        dist.destroy_process_group()
    result = compare_runs(ref, test)
    a = result.alignment
    assert result.modules[""] == "DistributedDataParallel"
    assert a.wrappers_test == [""] and a.unaligned_ref == [] and a.unaligned_test == []
    assert a.pairs["module.layers.2.0"] == ("layers.2.0", "wrapper") and len(a.pairs) == 14
    assert not result.unmatched_entries and result.summary() == "no divergence in 1 steps"


def test_bf16_llama_against_fp32_with_fp64_run(tmp_path: Path) -> None:
    """A bf16 Llama on dipu against fp32 on the CPU with an fp64 run: no divergence, the float32 loss (computed
    from bf16 logits) included; the precision of the bf16 run is named in the message."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))

    def run(device: str, dtype: torch.dtype, out: Path) -> Path:
        model = seeded(LlamaForCausalLM, config).to(device, dtype)
        with ModuleDump(model, out) as dump:
            model(input_ids=ids.to(device), labels=ids.to(device)).loss.backward()
            dump.step()
        return out

    result = compare_runs(run("cpu", torch.float32, tmp_path / "ref"), run("dipu", torch.bfloat16, tmp_path / "test"),
                          fp64=run("cpu", torch.float64, tmp_path / "fp64"))
    assert result.summary() == "no divergence in 1 steps"
    loss = next(e for e in result.forward if e.module == "").tensors["output.0"]
    assert "a bfloat16 run: judged at its tolerance" in loss.message
