"""Vendor-neutral fused operators (namespace ``dicp``) and the pattern rewrites that put them into ATen graphs.

The operators (``torch.ops.dicp.*``) are defined with a CompositeImplicitAutograd reference made of ATen
operators: an eager island runs them on any device (dipu included), and fake and meta tensors get their
shape and dtype from the same reference, so no separate fake kernel can drift from it.

- ``dicp::rms_norm(x, weight, eps)``: ``weight * (h * rsqrt(mean(h**2, -1) + eps)).to(x.dtype)`` with
  ``h = x.float()`` (transformers' Llama / Qwen RMSNorm); the overload ``rms_norm.eps_tensor`` takes ``eps`` as
  a 0-dim tensor (``dynamic=True`` turns the module's float attribute into a graph input);
- ``dicp::silu_mul(a, b)``: ``silu(a) * b`` (the gated-MLP activation);
- ``dicp::attention(q, k, v, mask, scale, is_causal)``: scaled dot-product attention on ``(batch, heads, seq,
  dim)`` tensors, grouped-query key/value heads allowed (query heads a multiple of key/value heads), no
  dropout; ``scale=None`` means ``1/sqrt(dim)``.

The passes (:data:`~dicp.dynamo_bridge.vendor.GraphPass`: ``gm -> number of rewrites``) find the ATen
subgraphs these come from in AOTAutograd's graphs and replace them. A match is taken only when none of its
inner values is used outside it, so a training forward graph whose partitioner saved an inner value (the
``rsqrt`` of RMSNorm, attention's log-sum-exp) keeps those nodes; what a rewrite replaces is never needed by
anything else, and the graph's outputs are unchanged.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import torch
from torch.fx import GraphModule, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

__all__ = ["ALL_PASSES", "fuse_attention", "fuse_rms_norm", "fuse_silu_mul"]

aten = torch.ops.aten

_lib = torch.library.Library("dicp", "FRAGMENT")  # kept: the definitions live as long as this object


_DEFINED = hasattr(torch.ops.dicp, "rms_norm")  # a second import (importlib.reload) defines nothing twice


def _define(schema: str, fn: Callable[..., torch.Tensor]) -> None:
    name = schema.split("(", 1)[0]
    if not _DEFINED:
        _lib.define(schema)
        _lib.impl(name, fn, "CompositeImplicitAutograd")


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _silu_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(a) * b


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float | None,
               is_causal: bool) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale, enable_gqa=True)


_define("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor", _rms_norm)
_define("rms_norm.eps_tensor(Tensor x, Tensor weight, Tensor eps) -> Tensor", _rms_norm)
_define("silu_mul(Tensor a, Tensor b) -> Tensor", _silu_mul)
_define("attention(Tensor q, Tensor k, Tensor v, Tensor? mask, float? scale, bool is_causal) -> Tensor", _attention)


# ---------------------------------------------------------------------------------------------------- matching


def _is(node: object, *targets: object) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in targets


def _erased(node: Node) -> bool:
    """Whether an earlier match of the same pass erased ``node`` (the passes walk a snapshot of the nodes)."""
    return getattr(node, "_erased", False)


def _only_user(node: Node) -> Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _val(node: object) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return val if isinstance(val, torch.Tensor) else None


def _cast_to(node: object) -> torch.dtype | None:
    """The dtype ``node`` casts its input to, when it is a pure dtype cast (same device, layout, format)."""
    if _is(node, aten._to_copy.default) and set(node.kwargs) <= {"dtype"} and len(node.args) == 1:
        return node.kwargs.get("dtype")
    if _is(node, torch.ops.prims.convert_element_type.default):
        return node.args[1]
    return None


def _last_dim(dims: object, node: Node) -> bool:
    val = _val(node)
    if not isinstance(dims, (list, tuple)) or len(dims) != 1 or val is None:
        return False
    return dims[0] in (-1, val.dim() - 1)


def _replace(gm: GraphModule, last: Node, target: object, args: tuple, dead: list[Node]) -> None:
    """Insert ``target(*args)`` before ``last``, route ``last``'s users to it, erase ``dead`` (users first)."""
    with gm.graph.inserting_before(last):
        fused = gm.graph.call_function(target, args)
    fused.meta.update({k: v for k, v in last.meta.items() if k in ("val", "tensor_meta", "stack_trace")})
    last.replace_all_uses_with(fused)
    for node in dead:
        gm.graph.erase_node(node)


def _finish(gm: GraphModule, count: int) -> int:
    if count:
        gm.graph.lint()
        gm.recompile()
    return count


def fuse_rms_norm(gm: GraphModule) -> int:
    """``pow(h, 2) -> mean(-1, keepdim) -> add(eps) -> rsqrt -> mul(h, .) [-> cast] -> mul(weight, .)`` with an
    optional ``h = x.to(float32)`` in front: ``dicp.rms_norm(x, weight, eps)``."""
    count = 0
    for rsqrt in list(gm.graph.nodes):
        if not _is(rsqrt, aten.rsqrt.default) or _erased(rsqrt):
            continue
        add = rsqrt.args[0]
        if not (_is(add, aten.add.Tensor, aten.add.Scalar) and len(add.users) == 1 and not add.kwargs):
            continue
        eps = add.args[1]
        eps_val = _val(eps)
        if not (isinstance(eps, (int, float)) or (eps_val is not None and eps_val.dim() == 0)):
            continue
        mean = add.args[0]
        if not (_is(mean, aten.mean.dim) and len(mean.users) == 1 and len(mean.args) >= 3 and mean.args[2] is True
                and not mean.kwargs):
            continue
        power = mean.args[0]
        if not (_is(power, aten.pow.Tensor_Scalar) and power.args[1] == 2 and len(power.users) == 1):
            continue
        h = power.args[0]
        if not _last_dim(mean.args[1], h):
            continue
        norm = _only_user(rsqrt)
        if not (_is(norm, aten.mul.Tensor) and set(norm.args) == {h, rsqrt}):
            continue
        x, inner = h, [norm, rsqrt, add, mean, power]
        in_dtype = _cast_to(h)
        cast_back = _only_user(norm)
        source = _val(h.args[0]) if in_dtype is not None else None
        if in_dtype == torch.float32 and len(h.users) == 2 and source is not None \
                and _cast_to(cast_back) == source.dtype:
            x, inner = h.args[0], [cast_back, *inner, h]  # the float32 round trip of a low-precision x
        last = inner[0]
        scale = _only_user(last)
        if not _is(scale, aten.mul.Tensor) or len(scale.args) != 2:
            continue
        weight = scale.args[0] if scale.args[1] is last else scale.args[1]
        w_val, x_val = _val(weight), _val(x)
        if w_val is None or x_val is None or w_val.dim() != 1 or not _same(w_val.shape[0], x_val.shape[-1]):
            continue
        if _val(h) is None or _val(h).dtype != torch.float32:
            continue
        if isinstance(eps, Node):  # dynamic=True makes a float attribute a graph input (a 0-dim tensor)
            _replace(gm, scale, torch.ops.dicp.rms_norm.eps_tensor, (x, weight, eps), [scale, *inner])
        else:
            _replace(gm, scale, torch.ops.dicp.rms_norm.default, (x, weight, float(eps)), [scale, *inner])
        count += 1
    return _finish(gm, count)


def fuse_silu_mul(gm: GraphModule) -> int:
    """``mul(silu(a), b)`` (either order) where nothing else reads ``silu(a)``: ``dicp.silu_mul(a, b)``."""
    count = 0
    for silu in list(gm.graph.nodes):
        if not _is(silu, aten.silu.default) or _erased(silu):
            continue
        mul = _only_user(silu)
        if not (_is(mul, aten.mul.Tensor) and len(mul.args) == 2 and not mul.kwargs):
            continue
        other = mul.args[1] if mul.args[0] is silu else mul.args[0]
        if other is silu or _val(other) is None or _val(silu) is None or _val(mul) is None:
            continue
        if _val(other).dtype != _val(silu).dtype:
            continue
        _replace(gm, mul, torch.ops.dicp.silu_mul.default, (silu.args[0], other), [mul, silu])
        count += 1
    return _finish(gm, count)


def _sdpa_args(node: Node) -> tuple | None:
    """``(q, k, v, mask, dropout_p, is_causal, scale)`` of a fused ATen attention node, else None."""
    args, kw = node.args, node.kwargs
    if _is(node, aten._scaled_dot_product_flash_attention_for_cpu.default):
        full = (*args, *(None,) * 5)[:5]
        return (*full[:3], kw.get("attn_mask"), full[3] or 0.0, bool(full[4]), kw.get("scale"))
    if _is(node, aten._scaled_dot_product_flash_attention.default):
        full = (*args, *(None,) * 6)[:6]
        return (*full[:3], None, full[3] or 0.0, bool(full[4]), kw.get("scale"))
    if _is(node, aten._scaled_dot_product_efficient_attention.default,
           aten._scaled_dot_product_fused_attention_overrideable.default):
        full = (*args, *(None,) * 7)[:7]
        return (*full[:4], full[5] or 0.0, bool(full[6]), kw.get("scale"))
    return None


def fuse_attention(gm: GraphModule) -> int:
    """PyTorch's fused attention operators (the CPU's ``_scaled_dot_product_flash_attention_for_cpu``, flash,
    memory-efficient, the ``overrideable`` one of out-of-tree devices) whose only used result is the output,
    without dropout, and ``aten.scaled_dot_product_attention`` itself where a graph keeps it:
    ``dicp.attention(q, k, v, mask, scale, is_causal)``."""
    count = 0
    for node in list(gm.graph.nodes):
        if _erased(node):
            continue
        if _is(node, aten.scaled_dot_product_attention.default):
            args = (*node.args, *(None,) * 6)[:6]
            q, k, v, mask, dropout, causal = args
            scale, last, dead = node.kwargs.get("scale"), node, [node]
        else:
            parsed = _sdpa_args(node)
            if parsed is None:
                continue
            q, k, v, mask, dropout, causal, scale = parsed
            getters = list(node.users)
            if not all(_is(g, operator.getitem) for g in getters):
                continue
            used = [g for g in getters if g.users]
            if len(used) != 1 or used[0].args[1] != 0:
                continue
            last, dead = used[0], [*getters, node]  # unused getitems (the log-sum-exp) go with the node
        q_val, k_val = _val(q), _val(k)
        if dropout not in (0, 0.0, None) or q_val is None or k_val is None or q_val.dim() != 4 or k_val.dim() != 4:
            continue
        if _val(last) is None:
            continue
        if scale is None and type(q_val.shape[-1]) is int:
            scale = 1.0 / math.sqrt(q_val.shape[-1])
        if not (scale is None or isinstance(scale, (int, float))):
            continue
        scale = None if scale is None else float(scale)
        _replace(gm, last, torch.ops.dicp.attention.default, (q, k, v, mask, scale, bool(causal)), dead)
        count += 1
    return _finish(gm, count)


def _same(a: object, b: object) -> bool:
    """``a == b`` for sizes, decided without adding a guard (an unknown symbolic answer is False)."""
    return statically_known_true(a == b)


#: Every pass of this module, in the order a vendor should run them.
ALL_PASSES: tuple[Callable[[GraphModule], int], ...] = (fuse_rms_norm, fuse_silu_mul, fuse_attention)
