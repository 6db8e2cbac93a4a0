"""droplet's dlinfer kernels on dipu tensors: they run (the counters name ``droplet``), equal the reference kernels
on the CPU by ``diopi.compare``'s rules, and a fault injected into the DIOPI fused function they call makes that
comparison fail (so these tests can fail)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import dlinfer
import torch_dipu  # noqa: F401  (the dipu device)
from diopi.compare import all_passed, compare_outputs
from dlinfer.ops import llm
from torch_dipu.vendors import droplet

DTYPES = [torch.float32, torch.bfloat16]


def _dipu(x):
    if isinstance(x, torch.Tensor):
        return x.to("dipu")
    if isinstance(x, (list, tuple)):
        return type(x)(_dipu(v) for v in x)
    return x


def _cpu(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(_cpu(v) for v in x)
    return x


def _randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _decode_case(dtype: torch.dtype) -> tuple:
    bs, kv_lens = 4, [6, 1, 9]
    table = torch.tensor([[5, 2, 7], [0, 8, 8], [3, 1, 6]], dtype=torch.int32)  # shuffled blocks
    kc, vc = _randn(9, bs, 2, 16, seed=1, dtype=dtype), _randn(9, bs, 2, 16, seed=2, dtype=dtype)
    return (_randn(3, 4, 16, seed=3, dtype=dtype), kc, vc, table, bs, torch.tensor(kv_lens), max(kv_lens), 4, 2)


def _prefill_case(dtype: torch.dtype) -> tuple:
    lens = [5, 2, 7]
    return (_randn(14, 4, 16, seed=4, dtype=dtype), _randn(14, 2, 16, seed=5, dtype=dtype),
            _randn(14, 2, 16, seed=6, dtype=dtype), torch.tensor([0, 5, 7]), torch.tensor(lens), 7, 4, 2)


def _paged_prefill_case(dtype: torch.dtype) -> tuple:
    q, k, v, start, qlen, max_q, hq, hkv = _prefill_case(dtype)
    query, kc, vc, table, bs, _, _, _, _ = _decode_case(dtype)
    kv_lens = torch.tensor([8, 3, 12])  # 3, 1 and 5 cached tokens before the new ones
    return (q, k, v, kc, vc, table, bs, start, qlen, kv_lens, max_q, hq, hkv)


def _rotary_cos_sin(dtype: torch.dtype, rot: int) -> tuple:
    ang = torch.arange(7, dtype=torch.float32)[:, None] * torch.linspace(1, 0.01, rot // 2)[None]
    emb = torch.cat((ang, ang), -1)
    return (_randn(7, 4, 16, seed=7, dtype=dtype), _randn(7, 2, 16, seed=8, dtype=dtype), emb.cos().to(dtype),
            emb.sin().to(dtype))


def _rotary_cache(dtype: torch.dtype, rot: int) -> tuple:
    table = torch.arange(32, dtype=torch.float32)[:, None] * torch.linspace(1, 0.01, rot // 2)[None]
    cache = torch.cat((table.cos(), table.sin()), -1).to(dtype)
    return (_randn(7, 4, 16, seed=9, dtype=dtype), _randn(7, 2, 16, seed=10, dtype=dtype), None, None,
            torch.tensor([0, 3, 1, 30, 4, 4, 2]), cache)


#: op -> (function, args builder); each droplet kernel's common case
CASES = {
    "rms_norm": (llm.rms_norm, lambda dt: (_randn(6, 32, seed=11, dtype=dt), _randn(32, seed=12, dtype=dt), 1e-6)),
    "add_rms_norm": (llm.add_rms_norm, lambda dt: (_randn(6, 32, seed=13, dtype=dt), _randn(6, 32, seed=14, dtype=dt),
                                                   _randn(32, seed=15, dtype=dt), 1e-5)),
    "apply_rotary_pos_emb": (llm.apply_rotary_pos_emb, lambda dt: _rotary_cos_sin(dt, 16)),
    "silu_and_mul": (llm.silu_and_mul, lambda dt: (_randn(5, 24, seed=16, dtype=dt),)),
    "prefill_attention": (llm.prefill_attention, _prefill_case),
    "paged_decode_attention": (llm.paged_decode_attention, _decode_case),
    "paged_prefill_attention": (llm.paged_prefill_attention, _paged_prefill_case),
    "moe_gating_topk_softmax": (llm.moe_gating_topk_softmax, lambda dt: (_randn(9, 8, seed=17, dtype=dt), 2, True)),
}
#: the DIOPI function each kernel calls (DROPLET_FAULTS patterns)
DIOPI_FUNCTION = {
    "rms_norm": "diopiFusedRMSNorm", "add_rms_norm": "diopiAddRMSNorm", "apply_rotary_pos_emb": "diopiRotaryEmbedding",
    "silu_and_mul": "diopiSiluAndMul", "prefill_attention": "diopiFlashAttentionVarlen",
    "paged_decode_attention": "diopiPagedAttentionDecode", "paged_prefill_attention": "diopiFlashAttentionVarlen",
    "moe_gating_topk_softmax": "diopiMoeGatingTopkSoftmax",
}


def _run_both(op: str, fn, args: tuple) -> tuple:
    """(dipu result on the host, CPU reference result), asserting which kernels ran."""
    dlinfer.reset_counts()
    expected = fn(*args)
    assert dlinfer.kernel_counts() == {(op, "reference"): 1}
    dlinfer.reset_counts()
    actual = _cpu(fn(*_dipu(args)))
    assert dlinfer.kernel_counts() == {(op, "droplet"): 1}
    return actual, expected


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", sorted(CASES))
def test_droplet_kernel_equals_reference(op, dtype):
    fn, build = CASES[op]
    args = build(dtype)
    actual, expected = _run_both(op, fn, args)
    fp64 = None
    if dtype != torch.float32:  # the noise-floor rule: the reference in float64 on the same inputs
        fp64 = fn(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args])
    results = compare_outputs(actual, expected, expected_fp64=fp64)
    assert all_passed(results), "\n".join(r.message for r in results)


@pytest.mark.parametrize("op", sorted(CASES))
def test_injected_fault_in_the_diopi_function_fails_the_comparison(op):
    fn, build = CASES[op]
    args = build(torch.float32)
    with droplet.switches(faults=f"{DIOPI_FUNCTION[op]}:bias:0.25"):
        actual, expected = _run_both(op, fn, args)
    assert not all_passed(compare_outputs(actual, expected))


def test_other_argument_forms():
    """Partial rotary, the cos_sin_cache form, fill_kv_cache, and forms that go to the reference inside droplet's
    kernel (int8 cache, alibi) or outside it (fused_moe has no DIOPI function)."""
    for fn, args in ((llm.apply_rotary_pos_emb, _rotary_cos_sin(torch.float32, 8)),
                     (llm.apply_rotary_pos_emb, _rotary_cache(torch.float32, 16)),
                     (llm.apply_rotary_pos_emb, _rotary_cache(torch.float32, 8)),
                     (llm.prefill_attention, (*_prefill_case(torch.float32), [], None, [0.5, 0.25, 0.125, 0.0625]))):
        actual, expected = _run_both(fn.__name__, fn, args)
        assert all_passed(compare_outputs(actual, expected)), fn.__name__
    k, v = _randn(5, 2, 8, seed=20), _randn(5, 2, 8, seed=21)
    slots = torch.tensor([9, 2, 14, 3, 0])
    caches = [torch.zeros(4, 4, 2, 8), torch.zeros(4, 4, 2, 8)]
    llm.fill_kv_cache(k, v, *caches, slots)
    dipu_caches = _dipu([torch.zeros(4, 4, 2, 8), torch.zeros(4, 4, 2, 8)])
    dlinfer.reset_counts()
    llm.fill_kv_cache(_dipu(k), _dipu(v), *dipu_caches, _dipu(slots))
    assert dlinfer.kernel_counts() == {("fill_kv_cache", "droplet"): 1}
    assert all_passed(compare_outputs(_cpu(dipu_caches), caches))
    moe_args = (_randn(4, 8, seed=22), _randn(3, 12, 8, seed=23), _randn(3, 8, 6, seed=24),
                torch.full((4, 2), 0.5), torch.tensor([[0, 1], [2, 1], [0, 2], [1, 0]]), 2)
    dlinfer.reset_counts()
    actual = llm.fused_moe(*_dipu(moe_args))
    assert dlinfer.kernel_counts() == {("fused_moe", "reference"): 1}
    assert actual.device.type == "dipu"
    assert all_passed(compare_outputs(actual.cpu(), llm.fused_moe(*moe_args)))


def test_quantized_paths_on_dipu():
    """The int8 cache (droplet's kernels hand it to the reference) and the quantized operators (reference on dipu)
    give the CPU results."""
    k, v, slots = _randn(6, 2, 8, seed=30), _randn(6, 2, 8, seed=31), torch.tensor([3, 9, 0, 12, 5, 1])
    host = [torch.zeros(4, 4, 2, 8, dtype=torch.int8), torch.zeros(4, 4, 2, 8, dtype=torch.int8),
            *(torch.zeros(4, 4, 2) for _ in range(4))]
    dev = _dipu([t.clone() for t in host])
    for kcache, vcache, ks, kz, vs, vz in (host, dev):
        on = kcache.device.type
        llm.fill_kv_cache(k.to(on), v.to(on), kcache, vcache, slots.to(on), (ks, kz), (vs, vz), quant_bits=8)
    assert all_passed(compare_outputs(_cpu(dev), host))
    q, table, lens = _randn(2, 4, 8, seed=32), torch.tensor([[0, 3], [2, 1]]), torch.tensor([5, 3])
    args = (q, host[0], host[1], table, 4, lens, 5, 4, 2)
    quant = {"kv_scales": (host[2], host[4]), "kv_zeros": (host[3], host[5]), "quant_bits": 8}
    expected = llm.paged_decode_attention(*args, **quant)
    dlinfer.reset_counts()
    actual = llm.paged_decode_attention(*_dipu(args), **{n: _dipu(t) for n, t in quant.items()})
    assert dlinfer.kernel_counts() == {("paged_decode_attention", "droplet"): 1}
    assert all_passed(compare_outputs(actual.cpu(), expected))
    x, w = _randn(4, 32, seed=33), _randn(32, seed=34)
    qa, sa = llm.dynamic_quant(x)
    for fn, fargs in ((llm.rms_norm_w8a8, (x, w, 1e-6)), (llm.add_rms_norm_w8a8, (x, x, w, 1e-6)),
                      (llm.linear_w8a8, (qa, qa[:3], sa, torch.rand(3), torch.bfloat16)),
                      (llm.weight_quant_matmul, (x, torch.randint(0, 255, (32, 4), dtype=torch.uint8),
                                                 torch.rand(4, 8), None, None, False, 8))):
        assert all_passed(compare_outputs(_cpu(fn(*_dipu(fargs))), fn(*fargs))), fn.__name__


def test_not_registered_when_another_vendor_is_configured():
    """With ``DIPU_DEVICE`` naming another vendor, droplet's entry point registers nothing and leaves torch_dipu
    unimported (a fresh interpreter: vendors load once per process)."""
    code = ("import sys, torch\n"
            "from dlinfer.ops import llm\n"
            "from dlinfer.registry import registry\n"
            "llm.rms_norm(torch.ones(2, 4), torch.ones(4), 1e-6)\n"
            "print(registry.kernel('rms_norm', 'dipu')[0], 'torch_dipu' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIPU_", "DROPLET_", "DLINFER_"))}
    env["DIPU_DEVICE"] = "othervendor"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["reference", "False"]
    assert "failed to register" not in proc.stderr  # it did not try to start torch_dipu on the other vendor
