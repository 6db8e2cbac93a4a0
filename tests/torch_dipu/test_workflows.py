"""Workflow parity: everyday training code runs on the CPU and on dipu with the same seeds and agrees.

Each test writes its workflow once as ``run(device)`` and hands it to :func:`assert_parity`, which runs it
on both devices right after ``torch.manual_seed(SEED)`` and compares the returned values (losses,
gradients, parameters) with ``torch.testing.assert_close``. droplet runs the CPU's kernels and its
generators are host generators, so float32 results agree to rounding noise; low-precision (autocast)
results are judged by the noise rule of ``diopi/compare.py`` instead (:func:`assert_within_noise`).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize
from torch.utils.checkpoint import checkpoint

import torch_dipu  # noqa: F401  (registers the dipu device)
from torch_dipu.vendors import droplet

SEED = 0

# ---------------------------------------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------------------------------------


def host(tree: Any, device: str | None = None) -> Any:
    """``tree`` with every tensor detached and copied to the CPU; checks each tensor was on ``device``."""
    if isinstance(tree, torch.Tensor):
        if device is not None:
            assert tree.device.type == device, f"expected a {device} tensor, got one on {tree.device}"
        return tree.detach().cpu()
    if isinstance(tree, Mapping):
        return {k: host(v, device) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return [host(v, device) for v in tree]
    return tree


def on_both(run: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``run(device, *args, **kwargs)`` on the CPU and on dipu, each after ``torch.manual_seed(SEED)``."""
    results = []
    for device in ("cpu", "dipu"):
        torch.manual_seed(SEED)
        results.append(host(run(device, *args, **kwargs), device))
    return results[0], results[1]


def assert_parity(run: Callable[..., Any], *args: Any, rtol: float | None = None, atol: float | None = None,
                  **kwargs: Any) -> tuple[Any, Any]:
    """Run ``run`` on both devices and assert the dipu results equal the CPU's (float32 tolerance)."""
    want, got = on_both(run, *args, **kwargs)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    return want, got


def leaves(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(tree, Mapping):
        for k, v in tree.items():
            yield from leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(tree, list | tuple):
        for i, v in enumerate(tree):
            yield from leaves(v, f"{prefix}[{i}]")
    else:
        yield prefix, tree


def assert_within_noise(got: Any, want: Any, ref: Any, k: float = 2.0, floor: float = 1e-5) -> None:
    """Low-precision parity: ``got`` (dipu) is no further from the float32 reference ``ref`` than ``k``
    times the distance of ``want`` (the CPU in the same low precision) from it, plus a float32 floor."""
    flat_want, flat_ref = dict(leaves(want)), dict(leaves(ref))
    for name, g in leaves(got):
        w, r = flat_want[name], flat_ref[name]
        if not isinstance(g, torch.Tensor):
            assert g == w, f"{name}: dipu {g} != cpu {w}"
            continue
        err_got = (g.double() - r.double()).abs().max().item()
        err_want = (w.double() - r.double()).abs().max().item()
        assert err_got <= k * err_want + floor, (
            f"{name}: dipu is {err_got:.3g} from the float32 reference, the CPU in the same dtype {err_want:.3g}")


def make_batches(steps: int = 3, batch: int = 8, d_in: int = 6, d_out: int = 3) -> list[tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(SEED + 1)
    return [(torch.randn(batch, d_in, generator=gen), torch.randn(batch, d_out, generator=gen)) for _ in range(steps)]


def mlp(d_in: int = 6, hidden: int = 16, d_out: int = 3) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, d_out))


def state(model: nn.Module) -> dict[str, dict[str, torch.Tensor]]:
    """Parameters, their gradients and the buffers of ``model``, by name."""
    return {
        "params": dict(model.named_parameters()),
        "grads": {n: p.grad for n, p in model.named_parameters() if p.grad is not None},
        "buffers": dict(model.named_buffers()),
    }


def train(model: nn.Module, device: str, make_optimizer: Callable[..., torch.optim.Optimizer] | None = None,
          batches: list[tuple[torch.Tensor, ...]] | None = None, loss_fn: Callable[..., torch.Tensor] = F.mse_loss,
          optimizer: torch.optim.Optimizer | None = None) -> dict[str, Any]:
    """A few optimizer steps of ``model`` (moved to ``device``); losses, parameters, gradients, buffers."""
    model = model.to(device)
    if optimizer is None:
        optimizer = (make_optimizer or (lambda ps: torch.optim.SGD(ps, lr=0.1)))(model.parameters())
    losses = []
    for x, y in batches or make_batches():
        loss = loss_fn(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return {"losses": torch.stack(losses), **state(model)}


class Tied(nn.Module):
    """Two linear layers sharing one weight (an encoder and its transposed decoder use it differently)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6, bias=False)
        self.b = nn.Linear(6, 6)
        self.b.weight = self.a.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x)))


QWEN_SIZES = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2)


def tiny_qwen(**overrides: Any) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(SEED)
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**{**QWEN_SIZES, **overrides}))


def token_batches(steps: int = 3, batch: int = 2, seq_len: int = 16) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(SEED + 2)
    return [torch.randint(0, QWEN_SIZES["vocab_size"], (batch, seq_len), generator=gen) for _ in range(steps)]


def qwen_grads(model: nn.Module, ids: torch.Tensor, seed: int = 1) -> dict[str, Any]:
    """Loss and gradients of one forward/backward of a causal LM (after ``torch.manual_seed(seed)``)."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return {"loss": loss.detach(), "grads": {n: p.grad for n, p in model.named_parameters()}}


# ---------------------------------------------------------------------------------------------------------
# module state across .to("dipu")
# ---------------------------------------------------------------------------------------------------------


def test_tied_weights_survive_move_and_gradient_sums_both_users():
    def run(device):
        model = Tied()
        n_params = len(list(model.parameters()))
        model.to(device)
        assert model.a.weight is model.b.weight, "the shared weight was split by .to()"
        assert len(list(model.parameters())) == n_params == 2
        x = torch.randn(4, 6).to(device)
        model(x).square().sum().backward()
        return {"grad": model.a.weight.grad, "bias_grad": model.b.bias.grad}

    want, got = assert_parity(run)
    # the shared gradient is not either user's alone: recompute the decoder-only contribution on the CPU
    torch.manual_seed(SEED)
    model = Tied()
    model.b.weight = nn.Parameter(model.a.weight.detach().clone())
    model(torch.randn(4, 6)).square().sum().backward()
    assert not torch.allclose(got["grad"], model.b.weight.grad)
    assert not torch.allclose(got["grad"], model.a.weight.grad)


class Symmetric(nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w.triu() + w.triu(1).mT


def test_optimizer_created_before_move_updates_the_model():
    def run(device):
        model = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 3))
        parametrize.register_parametrization(model[0], "weight", Symmetric())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        before = list(model.parameters())
        hooked = []
        model[2].weight.register_hook(lambda g: hooked.append(g.device.type))
        model.to(device)
        after = list(model.parameters())
        assert len(after) == len(before) and all(p is q for p, q in zip(after, before, strict=True)), (
            "parameters are new objects after .to(): the optimizer created before it holds stale ones")
        assert all(p.requires_grad and p.device.type == device for p in after)
        assert parametrize.is_parametrized(model[0], "weight")
        result = train(model, device, optimizer=optimizer)
        assert hooked == [device] * 3, f"a hook registered before .to() fired {hooked}"
        w = model[0].weight
        torch.testing.assert_close(w.detach().cpu(), w.detach().cpu().mT)
        return result

    want, got = assert_parity(run)
    assert not torch.equal(want["params"]["2.weight"], mlp_init_weight())


def mlp_init_weight() -> torch.Tensor:
    torch.manual_seed(SEED)
    model = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 3))
    return model[2].weight.detach()


def test_qwen2_tied_embeddings_trains_like_cpu():
    """The acceptance case: a tiny Qwen2 with tied embeddings, 3 AdamW steps on dipu, losses as on the CPU."""

    def run(device):
        model = tiny_qwen(tie_word_embeddings=True)
        n_params = len(list(model.parameters()))
        numel = sum(p.numel() for p in model.parameters())
        model.to(device)
        assert model.lm_head.weight is model.model.embed_tokens.weight
        assert len(list(model.parameters())) == n_params
        assert sum(p.numel() for p in model.parameters()) == numel
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses = []
        for ids in token_batches():
            ids = ids.to(device)
            loss = model(input_ids=ids, labels=ids).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        assert model.lm_head.weight is model.model.embed_tokens.weight
        return {"losses": torch.stack(losses), "n_params": n_params, "embed": model.lm_head.weight}

    assert_parity(run, rtol=1e-4, atol=1e-5)


def test_copy_deepcopy_keeps_ties_and_copies_storage():
    torch.manual_seed(SEED)
    model = Tied().to("dipu")
    clone = copy.deepcopy(model)
    assert clone.a.weight is clone.b.weight
    assert clone.a.weight is not model.a.weight
    assert clone.a.weight.device.type == "dipu" and isinstance(clone.a.weight, nn.Parameter)
    assert len(list(clone.parameters())) == 2
    torch.testing.assert_close(host(state(clone)), host(state(model)), rtol=0, atol=0)
    with torch.no_grad():
        clone.a.weight.add_(1.0)
    assert torch.equal(clone.b.weight.cpu(), clone.a.weight.cpu())
    assert not torch.equal(clone.a.weight.cpu(), model.a.weight.cpu()), "the copy shares storage with the original"


@pytest.mark.parametrize("init", ["reset_parameters", "load_state_dict"])
def test_meta_init_then_to_empty(init):
    def build():
        return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 3))

    source = build()

    def run(device):
        with torch.device("meta"):
            model = build()
        assert all(p.is_meta for p in model.parameters())
        model.to_empty(device=device)
        if init == "reset_parameters":
            torch.manual_seed(SEED)
            for module in model.modules():
                if hasattr(module, "reset_parameters"):
                    module.reset_parameters()
        else:
            model.load_state_dict(source.state_dict())
        return train(model, device)

    want, _ = assert_parity(run)
    if init == "load_state_dict":
        assert not torch.equal(want["params"]["0.weight"], source[0].weight.detach())  # it trained


# ---------------------------------------------------------------------------------------------------------
# random numbers: checkpoint replays, fork_rng, generators
# ---------------------------------------------------------------------------------------------------------


class DropoutBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.drop, self.fc2 = nn.Linear(8, 32), nn.Dropout(p=0.5), nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(torch.tanh(self.fc1(x))))


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_replays_dropout_mask(use_reentrant):
    torch.manual_seed(SEED)
    block = DropoutBlock().to("dipu")
    x = torch.randn(4, 8).to("dipu").requires_grad_()

    def grads(checkpointed: bool, seed: int = 1) -> dict[str, Any]:
        block.zero_grad(set_to_none=True)
        x.grad = None
        torch.manual_seed(seed)
        out = checkpoint(block, x, use_reentrant=use_reentrant) if checkpointed else block(x)
        torch.rand(16, device="dipu")  # the RNG moves on between forward and backward, as in training
        out.square().sum().backward()
        return host({"out": out, "x": x.grad, **state(block)["grads"]}, "dipu")

    plain = grads(checkpointed=False)
    torch.testing.assert_close(grads(checkpointed=True), plain)
    other_mask = grads(checkpointed=False, seed=2)
    assert not torch.allclose(other_mask["fc1.weight"], plain["fc1.weight"]), "dropout did not change the grads"


@pytest.mark.filterwarnings("ignore:DIPU reports that you have")
def test_fork_rng_restores_dipu_generator():
    torch.manual_seed(SEED)
    torch.rand(3, device="dipu")
    expected = torch.rand(5, device="dipu").cpu()
    torch.manual_seed(SEED)
    torch.rand(3, device="dipu")
    with torch.random.fork_rng(device_type="dipu"):
        torch.rand(100, device="dipu")
        torch.dipu.manual_seed(123)
        inside = torch.rand(5, device="dipu").cpu()
    assert torch.equal(torch.rand(5, device="dipu").cpu(), expected)
    assert not torch.equal(inside, expected)


@pytest.mark.parametrize("device", [None, 0, "dipu:0", torch.device("dipu", 0)],
                         ids=["current", "index", "str", "torch_device"])
def test_dipu_rng_state_round_trip(device):
    args = () if device is None else (device,)
    torch.manual_seed(SEED)
    saved = torch.dipu.get_rng_state(*args)
    assert saved.dtype == torch.uint8 and saved.device.type == "cpu"
    first = torch.randn(6, device="dipu").cpu()
    assert not torch.equal(torch.randn(6, device="dipu").cpu(), first)
    torch.dipu.set_rng_state(saved, *args)
    assert torch.equal(torch.randn(6, device="dipu").cpu(), first)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # gradient_checkpointing_enable: renamed in transformers 5
@pytest.mark.parametrize(("attn", "use_reentrant"), [("eager", True), ("sdpa", False)])
def test_transformers_gradient_checkpointing_with_dropout(attn, use_reentrant):
    model = tiny_qwen(attention_dropout=0.5, attn_implementation=attn).to("dipu").train()
    ids = token_batches(steps=1)[0].to("dipu")
    plain = host(qwen_grads(model, ids), "dipu")
    other_mask = host(qwen_grads(model, ids, seed=2), "dipu")
    assert not torch.allclose(plain["loss"], other_mask["loss"]), "attention dropout did not change the loss"
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
    assert model.is_gradient_checkpointing
    torch.testing.assert_close(host(qwen_grads(model, ids), "dipu"), plain)


N = 64
RANDOM_OPS: dict[str, Callable[[torch.Generator], torch.Tensor]] = {
    "randn": lambda g: torch.randn(N, device="dipu", generator=g),
    "rand": lambda g: torch.rand(N, device="dipu", generator=g),
    "randint": lambda g: torch.randint(0, 10_000, (N,), device="dipu", generator=g),
    "randperm": lambda g: torch.randperm(N, device="dipu", generator=g),
    "bernoulli": lambda g: torch.bernoulli(torch.full((N,), 0.5, device="dipu"), generator=g),
    "multinomial": lambda g: torch.multinomial(torch.ones(N, device="dipu"), N // 2, generator=g),
    "normal_": lambda g: torch.empty(N, device="dipu").normal_(generator=g),
    "uniform_": lambda g: torch.empty(N, device="dipu").uniform_(generator=g),
    "random_": lambda g: torch.empty(N, device="dipu").random_(0, 10_000, generator=g),
    "exponential_": lambda g: torch.empty(N, device="dipu").exponential_(generator=g),
}


@pytest.mark.parametrize("op", list(RANDOM_OPS))
def test_dipu_generator_reproducible(op):
    draw = RANDOM_OPS[op]
    g = torch.Generator(device="dipu")
    assert g.device.type == "dipu"

    def sample(seed: int) -> torch.Tensor:
        g.manual_seed(seed)
        out = draw(g)
        assert out.device.type == "dipu"
        return out.cpu()

    torch.manual_seed(SEED)
    global_next = torch.rand(8, device="dipu").cpu()
    torch.manual_seed(SEED)
    a = sample(1)
    assert torch.equal(torch.rand(8, device="dipu").cpu(), global_next), "the generator= argument was ignored"
    assert torch.equal(sample(1), a)
    assert not torch.equal(sample(2), a)
    saved = g.get_state()
    assert saved.dtype == torch.uint8 and saved.device.type == "cpu"
    b = draw(g).cpu()
    assert not torch.equal(draw(g).cpu(), b), "the generator's state did not advance"
    g.set_state(saved)
    assert torch.equal(draw(g).cpu(), b)


# ---------------------------------------------------------------------------------------------------------
# mixed precision, clipping, optimizers
# ---------------------------------------------------------------------------------------------------------

INF_STEP = 1


def amp_train(device: str, dtype: torch.dtype | None) -> dict[str, Any]:
    """GradScaler + autocast (``dtype=None``: neither, the float32 reference); step INF_STEP has an inf grad."""
    torch.manual_seed(SEED)
    model = mlp().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**10, growth_interval=2)
    losses, scales, skipped = [], [], []
    for step, (x, y) in enumerate(make_batches(steps=5)):
        cast = torch.autocast(device, dtype=dtype) if dtype else contextlib.nullcontext()
        with cast:
            out = model(x.to(device))
            loss = F.mse_loss(out.float(), y.to(device))
        assert out.dtype == (dtype or torch.float32)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        if step == INF_STEP:
            model[0].weight.grad[0, 0] = math.inf
        before = [p.detach().clone() for p in model.parameters()]
        scaler.step(optimizer)
        scaler.update()
        skipped.append(all(torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True)))
        losses.append(loss.detach())
        scales.append(scaler.get_scale())
    return {"losses": torch.stack(losses), "params": dict(model.named_parameters()), "scales": scales,
            "skipped": skipped}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_grad_scaler_with_autocast(dtype):
    want, got = on_both(amp_train, dtype)
    ref = host(amp_train("cpu", None))
    assert want["skipped"] == [step == INF_STEP for step in range(5)]
    assert got["skipped"] == want["skipped"], "the scaler did not skip (only) the step with an inf gradient"
    assert got["scales"] == want["scales"]
    assert_within_noise(got, want, ref)


@pytest.mark.parametrize("foreach", [True, False])
@pytest.mark.parametrize("clip", ["norm2", "norm_inf", "value"])
def test_clip_grad(clip, foreach):
    def run(device):
        model = mlp().to(device)
        x, y = make_batches(steps=1)[0]
        F.mse_loss(model(x.to(device)), y.to(device)).backward()
        params = list(model.parameters())
        largest = torch.stack([p.grad.abs().max() for p in params]).max().clone()
        if clip == "value":
            nn.utils.clip_grad_value_(params, clip_value=0.05, foreach=foreach)
            total = largest
        else:
            norm_type = 2.0 if clip == "norm2" else math.inf
            total = nn.utils.clip_grad_norm_(params, max_norm=0.1, norm_type=norm_type, foreach=foreach)
        return {"total": total, "largest": largest, "grads": state(model)["grads"]}

    want, _ = assert_parity(run)
    limit = 0.05 if clip == "value" else 0.1
    assert want["total"] > limit, "nothing to clip: the test would pass without clipping"
    assert max(g.abs().max() for g in want["grads"].values()) < want["largest"]


OPTIMIZERS: dict[str, tuple[type[torch.optim.Optimizer], dict[str, Any]]] = {
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    "sgd_nesterov": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True)),
    "adam": (torch.optim.Adam, dict(lr=0.01)),
    "adam_amsgrad": (torch.optim.Adam, dict(lr=0.01, amsgrad=True, weight_decay=0.01)),
    "adamw": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
    "rmsprop": (torch.optim.RMSprop, dict(lr=0.01, momentum=0.9, centered=True)),
    "adagrad": (torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.01)),
}


def fused_supported(cls: type[torch.optim.Optimizer]) -> bool:
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    return "fused" in inspect.signature(cls).parameters and "dipu" in _get_fused_kernels_supported_devices()


OPTIMIZER_CASES = [
    pytest.param(name, impl, id=f"{name}-{impl}")
    for name, (cls, _) in OPTIMIZERS.items()
    for impl in ("foreach", "single", "fused")
    if impl != "fused" or fused_supported(cls)
]


@pytest.mark.parametrize(("name", "impl"), OPTIMIZER_CASES)
def test_optimizer_matches_cpu(name, impl):
    cls, kwargs = OPTIMIZERS[name]
    impl_kwargs = {"foreach": dict(foreach=True), "single": dict(foreach=False), "fused": dict(fused=True)}[impl]
    want, _ = assert_parity(lambda device: train(mlp(), device, lambda ps: cls(ps, **kwargs, **impl_kwargs)))
    torch.manual_seed(SEED)
    assert not torch.equal(want["params"]["0.weight"], mlp()[0].weight.detach()), "the optimizer did nothing"


# ---------------------------------------------------------------------------------------------------------
# checkpoints: torch.save/load, safetensors, storages
# ---------------------------------------------------------------------------------------------------------

MAP_LOCATIONS = {
    "none": (None, "dipu"),
    "cpu": ("cpu", "cpu"),
    "dipu": ("dipu", "dipu"),
    "dipu0": ("dipu:0", "dipu"),
    "dict_to_cpu": ({"dipu:0": "cpu"}, "cpu"),
    "torch_device_dipu": (torch.device("dipu"), "dipu"),
    "torch_device_cpu": (torch.device("cpu"), "cpu"),
}


@pytest.mark.parametrize("target", ["cpu", "dipu"])
@pytest.mark.parametrize("where", list(MAP_LOCATIONS))
def test_state_dict_save_load(tmp_path, where, target):
    map_location, loaded_on = MAP_LOCATIONS[where]
    torch.manual_seed(SEED)
    model = mlp().to("dipu")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    train(model, "dipu", optimizer=optimizer)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, tmp_path / "ckpt.pt")

    ckpt = torch.load(tmp_path / "ckpt.pt", map_location=map_location, weights_only=True)
    for name, tensor in ckpt["model"].items():
        assert tensor.device.type == loaded_on, f"{name} loaded on {tensor.device}"
    torch.manual_seed(SEED + 1)
    fresh = mlp().to(target)
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=0.01)
    fresh.load_state_dict(ckpt["model"])
    fresh_opt.load_state_dict(ckpt["optimizer"])
    assert all(p.device.type == target for p in fresh.parameters())
    torch.testing.assert_close(host(fresh.state_dict()), host(model.state_dict()), rtol=0, atol=0)
    # both continue training identically: the optimizer state came along
    x, y = make_batches(steps=1)[0]
    for m, opt, dev in ((model, optimizer, "dipu"), (fresh, fresh_opt, target)):
        opt.zero_grad()
        F.mse_loss(m(x.to(dev)), y.to(dev)).backward()
        opt.step()
    torch.testing.assert_close(host(fresh.state_dict()), host(model.state_dict()))


def test_cpu_checkpoint_loads_onto_dipu(tmp_path):
    torch.manual_seed(SEED)
    model = mlp()
    torch.save(model.state_dict(), tmp_path / "cpu.pt")
    ckpt = torch.load(tmp_path / "cpu.pt", map_location="dipu", weights_only=True)
    assert {t.device.type for t in ckpt.values()} == {"dipu"}, "map_location='dipu' left CPU-saved tensors on CPU"
    torch.testing.assert_close(host(ckpt), host(model.state_dict()), rtol=0, atol=0)


def test_safetensors_dipu_tensors_and_tied_model(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    safetensors = pytest.importorskip("safetensors")
    torch.manual_seed(SEED)
    tensors = {"w": torch.randn(3, 4).to("dipu"), "t": torch.randn(4, 3).to("dipu").t(),
               "i": torch.arange(5).to("dipu")}
    st.save_file({k: v.contiguous() for k, v in tensors.items()}, tmp_path / "t.safetensors")
    loaded = st.load_file(tmp_path / "t.safetensors")
    torch.testing.assert_close(loaded, host(tensors), rtol=0, atol=0)

    model = Tied().to("dipu")
    st.save_model(model, tmp_path / "tied.safetensors")
    with safetensors.safe_open(tmp_path / "tied.safetensors", framework="pt") as f:
        stored = list(f.keys())
    assert len(stored) == 2, f"the tied weight was stored twice: {stored}"
    torch.manual_seed(SEED + 1)
    fresh = Tied().to("dipu")
    missing, unexpected = st.load_model(fresh, tmp_path / "tied.safetensors")
    assert not missing and not unexpected
    assert fresh.a.weight is fresh.b.weight and fresh.a.weight.device.type == "dipu"
    torch.testing.assert_close(host(fresh.state_dict()), host(model.state_dict()), rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_untyped_storage_of_dipu_tensor():
    base = torch.arange(12, dtype=torch.float32)
    t = base.to("dipu").view(3, 4)
    views = [t[1:, 2:], t.t(), t.view(-1), t[2]]
    storage = t.untyped_storage()
    assert storage.device.type == "dipu"
    assert storage.data_ptr() != 0
    assert storage.nbytes() == 48
    for v in views:
        assert v.untyped_storage().data_ptr() == storage.data_ptr()
        assert v.data_ptr() == storage.data_ptr() + v.storage_offset() * 4
    other = torch.arange(12, dtype=torch.float32).to("dipu")
    assert other.untyped_storage().data_ptr() != storage.data_ptr()
    want = base.untyped_storage()
    assert storage.cpu().device.type == "cpu"
    assert storage.cpu().tolist() == want.tolist()
    assert storage.tolist() == want.tolist()
    assert storage[4] == want[4] and storage[7] == want[7]
    typed = t.storage()
    assert typed.device.type == "dipu" and typed.dtype == torch.float32 and typed.size() == 12
    assert typed.tolist() == base.tolist()


# ---------------------------------------------------------------------------------------------------------
# layouts and autograd features
# ---------------------------------------------------------------------------------------------------------


def test_channels_last_conv_net():
    def run(device):
        net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3))
        net = net.to(device).to(memory_format=torch.channels_last)
        x = torch.randn(2, 3, 9, 9).to(device).contiguous(memory_format=torch.channels_last).requires_grad_()
        out = net(x)
        out.square().mean().backward()
        return {
            "out": out, "x_grad": x.grad, **state(net),
            "channels_last": out.is_contiguous(memory_format=torch.channels_last),
            "strides": [out.stride(), x.grad.stride(), *(p.stride() for p in net.parameters()),
                        *(p.grad.stride() for p in net.parameters())],
        }

    want, _ = assert_parity(run)
    assert want["channels_last"]


def test_double_backward_gradient_penalty():
    def run(device):
        model = mlp().to(device)
        x, y = make_batches(steps=1)[0]
        x = x.to(device).requires_grad_()
        out = model(x)
        (gx,) = torch.autograd.grad(out.sum(), x, create_graph=True)
        loss = F.mse_loss(out, y.to(device)) + 0.1 * gx.square().sum(1).sub(1).square().mean()
        loss.backward()
        return {"gx": gx, "loss": loss, **state(model)}

    want, _ = assert_parity(run)
    assert all(g.abs().sum() > 0 for g in want["grads"].values())


def test_torch_func_per_sample_grads():
    from torch.func import functional_call, grad, vmap

    def run(device):
        model = mlp().to(device)
        x, y = (t.to(device) for t in make_batches(steps=1)[0])
        params = {k: v.detach() for k, v in model.named_parameters()}

        def loss(p, xi, yi):
            return F.mse_loss(functional_call(model, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))

        per_sample = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
        outs = vmap(lambda xi: functional_call(model, params, (xi,)))(x)
        full = grad(lambda p: F.mse_loss(functional_call(model, p, (x,)), y))(params)
        for name in params:  # the mean of per-sample gradients is the batch gradient, on either device
            torch.testing.assert_close(per_sample[name].mean(0).cpu(), full[name].cpu())
        return {"per_sample": per_sample, "outs": outs, "full": full}

    assert_parity(run)


NORMS: dict[str, Callable[[nn.Module], nn.Module]] = {
    "weight_norm_legacy": lambda m: nn.utils.weight_norm(m),
    "weight_norm": lambda m: nn.utils.parametrizations.weight_norm(m),
    "spectral_norm": lambda m: nn.utils.parametrizations.spectral_norm(m),
}


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("norm", list(NORMS))
def test_weight_and_spectral_norm(norm):
    def run(device):
        model = mlp()
        NORMS[norm](model[0])
        result = train(model, device)
        result["weight"] = model[0].weight
        return result

    assert_parity(run)


# ---------------------------------------------------------------------------------------------------------
# data loading and pinned memory
# ---------------------------------------------------------------------------------------------------------


def test_pin_memory_tensor():
    x = torch.randn(4, 5)
    assert not x.is_pinned()
    pinned = x.pin_memory()
    assert pinned.is_pinned() and pinned.device.type == "cpu"
    assert torch.equal(pinned, x)
    assert not x.is_pinned()
    assert pinned[1:].is_pinned(), "a view of pinned memory is pinned"
    assert pinned.pin_memory().is_pinned()
    on_dipu = pinned.to("dipu", non_blocking=True)
    torch.dipu.synchronize()
    assert torch.equal(on_dipu.cpu(), x)


def test_dataloader_pinned_workers_train_like_cpu():
    x = torch.randn(32, 6, generator=torch.Generator().manual_seed(SEED + 3))
    dataset = torch.utils.data.TensorDataset(x, x[:, :3].sin())
    assert torch.accelerator.current_accelerator().type == "dipu"

    def run(device):
        loader = torch.utils.data.DataLoader(dataset, batch_size=8, num_workers=2, pin_memory=True)
        batches = []
        for xb, yb in loader:
            assert xb.is_pinned() and yb.is_pinned(), "DataLoader(pin_memory=True) returned unpinned batches"
            batches.append((xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)))
        assert len(batches) == 4
        return train(mlp(), device, batches=batches)

    assert_parity(run)


# ---------------------------------------------------------------------------------------------------------
# recurrent nets, CTC, embedding bags
# ---------------------------------------------------------------------------------------------------------

RNNS: dict[str, Callable[[], nn.Module]] = {
    "lstm": lambda: nn.LSTM(5, 7),
    "lstm_2layer_bi_batch_first": lambda: nn.LSTM(5, 7, num_layers=2, bidirectional=True, batch_first=True),
    "gru_bi": lambda: nn.GRU(5, 7, bidirectional=True),
    "gru_2layer_batch_first": lambda: nn.GRU(5, 7, num_layers=2, batch_first=True),
    "rnn_tanh": lambda: nn.RNN(5, 7),
    "rnn_relu_2layer_bi": lambda: nn.RNN(5, 7, num_layers=2, nonlinearity="relu", bidirectional=True),
}


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("kind", list(RNNS))
def test_rnn_forward_backward(kind, packed):
    def run(device):
        rnn = RNNS[kind]().to(device)
        x = torch.randn(3, 6, 5)  # (batch, time, feature)
        if not rnn.batch_first:
            x = x.transpose(0, 1).contiguous()
        x = x.to(device).requires_grad_()
        inputs = x
        if packed:
            lengths = torch.tensor([6, 2, 4])  # on the CPU, as pack_padded_sequence requires
            inputs = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=rnn.batch_first, enforce_sorted=False)
        out, hidden = rnn(inputs)
        if packed:
            out, out_lengths = nn.utils.rnn.pad_packed_sequence(out, batch_first=rnn.batch_first)
            assert out_lengths.tolist() == [6, 2, 4]
        hidden = list(hidden) if isinstance(hidden, tuple) else [hidden]
        (out.square().sum() + sum(h.sum() for h in hidden)).backward()
        return {"out": out, "hidden": hidden, "x_grad": x.grad, **state(rnn)}

    assert_parity(run)


CELLS = {"lstm_cell": nn.LSTMCell, "gru_cell": nn.GRUCell, "rnn_cell": nn.RNNCell}


@pytest.mark.parametrize("kind", list(CELLS))
def test_rnn_cell_forward_backward(kind):
    def run(device):
        cell = CELLS[kind](5, 7).to(device)
        xs = torch.randn(4, 3, 5).to(device).requires_grad_()
        state_ = None
        outs = []
        for x in xs:
            state_ = cell(x, state_)
            outs.append(state_[0] if isinstance(state_, tuple) else state_)
        torch.stack(outs).square().sum().backward()
        return {"outs": outs, "x_grad": xs.grad, **state(cell)}

    assert_parity(run)


@pytest.mark.parametrize("targets_layout", ["padded", "concatenated"])
@pytest.mark.parametrize("lengths", ["cpu_tensor", "tuple"])
def test_ctc_loss(lengths, targets_layout):
    input_lengths, target_lengths = [12, 10, 7], [4, 2, 3]

    def run(device):
        logits = torch.randn(12, 3, 6).to(device).requires_grad_()  # (T, N, C)
        targets = torch.randint(1, 6, (3, 4))
        if targets_layout == "concatenated":
            targets = torch.cat([row[:n] for row, n in zip(targets, target_lengths, strict=True)])
        if lengths == "cpu_tensor":
            il, tl = torch.tensor(input_lengths), torch.tensor(target_lengths)
        else:
            il, tl = tuple(input_lengths), tuple(target_lengths)
        log_probs = logits.log_softmax(2)
        losses = {
            reduction: F.ctc_loss(log_probs, targets.to(device), il, tl, reduction=reduction)
            for reduction in ("none", "mean")
        }
        losses["mean"].backward()
        return {"losses": losses, "grad": logits.grad}

    assert_parity(run)


@pytest.mark.parametrize("mode", ["sum", "mean", "max", "sum_weighted"])
def test_embedding_bag_with_offsets(mode):
    def run(device):
        bag = nn.EmbeddingBag(20, 5, mode="sum" if mode == "sum_weighted" else mode).to(device)
        indices = torch.tensor([1, 4, 4, 9, 0, 19, 3, 7]).to(device)
        offsets = torch.tensor([0, 3, 3, 6]).to(device)  # the third bag is empty
        weights = torch.rand(8).to(device) if mode == "sum_weighted" else None
        out = bag(indices, offsets, per_sample_weights=weights)
        out.square().sum().backward()
        return {"out": out, **state(bag)}

    assert_parity(run)


# ---------------------------------------------------------------------------------------------------------
# attention
# ---------------------------------------------------------------------------------------------------------

B, H, L, S, E = 2, 4, 5, 7, 8


def sdpa_mask(kind: str) -> torch.Tensor | None:
    shape = {"LS": (L, S), "B1LS": (B, 1, L, S), "BHLS": (B, H, L, S), "1HLS": (1, H, L, S)}[kind.split("_")[1]]
    if kind.startswith("bool"):
        mask = torch.rand(shape) > 0.4
        mask[..., 0] = True  # no fully masked row
        return mask
    return torch.randn(shape)


SDPA_CASES = {
    "bool_LS": dict(mask="bool_LS"),
    "bool_B1LS": dict(mask="bool_B1LS"),
    "bool_BHLS": dict(mask="bool_BHLS"),
    "float_LS": dict(mask="float_LS"),
    "float_B1LS": dict(mask="float_B1LS"),
    "float_1HLS": dict(mask="float_1HLS"),
    "causal": dict(is_causal=True),
    "gqa": dict(kv_heads=2),
    "gqa_causal": dict(kv_heads=2, is_causal=True),
    "gqa_bool_B1LS": dict(kv_heads=2, mask="bool_B1LS"),
}


@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_scaled_dot_product_attention(case):
    spec = SDPA_CASES[case]
    kv_heads = spec.get("kv_heads", H)

    def run(device):
        q = torch.randn(B, H, L, E).to(device).requires_grad_()
        k = torch.randn(B, kv_heads, S, E).to(device).requires_grad_()
        v = torch.randn(B, kv_heads, S, E).to(device).requires_grad_()
        mask = sdpa_mask(spec["mask"]).to(device) if "mask" in spec else None
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=spec.get("is_causal", False),
                                             enable_gqa=kv_heads != H)
        out.square().sum().backward()
        return {"out": out, "q": q.grad, "k": k.grad, "v": v.grad}

    want, _ = assert_parity(run)
    assert torch.isfinite(want["out"]).all()


def test_generate_left_padded_batch():
    pad = 0
    prompts = [[5, 17, 33, 2, 9, 41], [7, 3, 250]]
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])

    def run(device):
        model = tiny_qwen(tie_word_embeddings=True).to(device).eval()
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=6,
                             do_sample=False, pad_token_id=pad)
        return {"tokens": out}

    want, got = on_both(run)
    assert torch.equal(got["tokens"], want["tokens"]), f"dipu {got['tokens'].tolist()} != cpu {want['tokens'].tolist()}"
    # the padded row generates what it generates alone: left padding is masked out
    alone = tiny_qwen(tie_word_embeddings=True).eval().generate(
        input_ids=torch.tensor([prompts[1]]), max_new_tokens=6, do_sample=False, pad_token_id=pad)
    assert torch.equal(want["tokens"][1, width:], alone[0, len(prompts[1]):])


# ---------------------------------------------------------------------------------------------------------
# device limits
# ---------------------------------------------------------------------------------------------------------


def test_move_with_unsupported_dtype_names_parameter():
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    model[1].double()
    with droplet.switches(unsupported_dtypes={torch.float64}), pytest.raises((RuntimeError, TypeError)) as err:
        model.to("dipu")
    message = str(err.value)
    assert "1.weight" in message and "float64" in message, message
