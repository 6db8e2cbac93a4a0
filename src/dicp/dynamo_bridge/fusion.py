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
  dropout; ``scale=None`` means ``1/sqrt(dim)``;
- ``dicp::rotary(x, cos, sin)``: the rotary position embedding in "rotate half" form,
  ``cat(x1 * cos - x2 * sin, x2 * cos + x1 * sin, -1)`` with ``x1, x2`` the halves of ``x``'s last dimension and
  ``cos``/``sin`` of half its size, broadcast to ``x`` (transformers' ``apply_rotary_pos_emb``, whose ``cos`` and
  ``sin`` repeat one half twice).

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

__all__ = ["ALL_PASSES", "fold_matmul_views", "fuse_attention", "fuse_rms_norm", "fuse_rotary", "fuse_silu_mul"]

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


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    # in x's memory layout, as the elementwise formula it replaces: later views in the graph were traced on it
    return torch.empty_like(x).copy_(out)


_define("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor", _rms_norm)
_define("rms_norm.eps_tensor(Tensor x, Tensor weight, Tensor eps) -> Tensor", _rms_norm)
_define("silu_mul(Tensor a, Tensor b) -> Tensor", _silu_mul)
_define("rotary(Tensor x, Tensor cos, Tensor sin) -> Tensor", _rotary)
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
        k, v, repeat_dead = _unrepeated(k, v)
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
        _replace(gm, last, torch.ops.dicp.attention.default, (q, k, v, mask, scale, bool(causal)),
                 [*dead, *repeat_dead])
        count += 1
    return _finish(gm, count)


def _repeat_source(node: object) -> tuple[Node, list[Node]] | None:
    """``(kv, nodes)`` when ``node`` is transformers' ``repeat_kv(kv, n)``: ``view(clone(expand(unsqueeze(kv, 2),
    (B, H, n, S, D))), (B, H * n, S, D))`` (the clone optional), every inner value used once; else None."""
    if not _is(node, aten.view.default, aten._unsafe_view.default, aten.reshape.default) or len(node.users) != 1:
        return None
    nodes: list[Node] = [node]

    def below(n: Node) -> object:  # n's input, past whole-dimension slices (``t[:, :, None]``, symbolic sizes)
        arg = n.args[0]
        while _noop_slice(arg) and len(arg.users) == 1:
            nodes.append(arg)
            arg = arg.args[0]
        return arg

    inner = below(node)
    if _is(inner, aten.clone.default) and len(inner.users) == 1:
        nodes.append(inner)
        inner = below(inner)
    if not (_is(inner, aten.expand.default) and len(inner.users) == 1):
        return None
    nodes.append(inner)
    unsqueeze = below(inner)
    if not (_is(unsqueeze, aten.unsqueeze.default) and unsqueeze.args[1] == 2 and len(unsqueeze.users) == 1):
        return None
    nodes.append(unsqueeze)
    kv = below(unsqueeze)
    kv_val, wide, out = _val(kv), _val(inner), _val(node)
    if kv_val is None or wide is None or out is None or kv_val.dim() != 4 or wide.dim() != 5 or out.dim() != 4:
        return None
    b, h, s, d = kv_val.shape
    if not all(_same(x, y) for x, y in zip((*wide.shape[:2], *wide.shape[3:]), (b, h, s, d), strict=True)):
        return None
    if not all(_same(x, y) for x, y in zip(out.shape, (b, h * wide.shape[2], s, d), strict=True)):
        return None
    return kv, nodes


def _noop_slice(node: object) -> bool:
    """Whether ``node`` is a slice taking a whole dimension (a view equal to its input)."""
    parts = _slice_of(node)
    if parts is None:
        return False
    x, dim, start, end = parts
    x_val, val = _val(x), _val(node)
    return (start == 0 and x_val is not None and val is not None and val.dim() == x_val.dim()
            and all(_same(a, b) for a, b in zip(val.shape, x_val.shape, strict=True))
            and (end is None or type(end) is int and end >= 2 ** 62 or _same(_size(end), x_val.shape[dim])))


def _size(value: object) -> object:
    """A size argument as an int or SymInt: a Python int, or a node's SymInt value; else None."""
    if isinstance(value, Node):
        val = value.meta.get("val")
        return val if isinstance(val, (int, torch.SymInt)) else None
    return value if isinstance(value, int) else None


def _unrepeated(k: object, v: object) -> tuple[object, object, list[Node]]:
    """Key and value with a grouped-query ``repeat_kv`` of both dropped (``dicp.attention`` takes fewer key/value
    heads natively), and the nodes that became dead; unchanged when not both are repeated."""
    rk, rv = _repeat_source(k), _repeat_source(v)
    if rk is None or rv is None or k is v:
        return k, v, []
    return rk[0], rv[0], [*rk[1], *rv[1]]


def _slice_of(node: object) -> tuple[Node, int, object, object] | None:
    """``(x, dim, start, end)`` of a step-1 ``aten.slice``, else None."""
    if not _is(node, aten.slice.Tensor) or node.kwargs:
        return None
    x, dim, start, end, step = (*node.args, *(None, 0, None, None, 1)[len(node.args):])
    if step != 1:
        return None
    return x, dim or 0, start or 0, end


def _halves_equal(node: object) -> bool:
    """Whether ``node``'s two halves along its last dimension are provably equal: a chain of element-wise ops
    (cos, sin, casts, a product or quotient with a Python number) and unsqueezes of other dimensions, down to
    ``cat([a, a], -1)`` (transformers' ``emb = cat((freqs, freqs), -1)``)."""
    for _ in range(16):
        val = _val(node)
        if val is None or val.dim() == 0:
            return False
        last = val.dim() - 1
        if _is(node, aten.cat.default):
            parts, dim = node.args[0], (node.args[1] if len(node.args) > 1 else 0)
            return len(parts) == 2 and parts[0] is parts[1] and dim in (-1, last)
        if _is(node, aten.unsqueeze.default) and node.args[1] in (-1, last):
            return False
        if _is(node, aten.mul.Tensor, aten.div.Tensor, aten.mul.Scalar, aten.div.Scalar):
            if len(node.args) != 2 or not isinstance(node.args[1], (int, float)):
                return False
        elif not (_is(node, aten.cos.default, aten.sin.default, aten.unsqueeze.default) or _cast_to(node)):
            return False
        node = node.args[0]
    return False


def _other(node: Node, one: object) -> object:
    """The operand of binary ``node`` that is not ``one``."""
    return node.args[1] if node.args[0] is one else node.args[0]


def fuse_rotary(gm: GraphModule) -> int:
    """``add(mul(x, cos), mul(cat([neg(x[..., h:]), x[..., :h]], -1), sin))`` (transformers' rotary embedding,
    operands in either order) where ``cos`` and ``sin`` provably repeat one half twice:
    ``dicp.rotary(x, cos[..., :h], sin[..., :h])``."""
    count = 0
    halves: dict[tuple[Node, object], Node] = {}  # one slice of cos and one of sin for all the rotaries

    def half_of(t: Node, h: int | Node, before: Node) -> Node:
        if (t, h) not in halves:  # a symbolic half (a node) is defined late: slice right before its use
            with gm.graph.inserting_before(before) if isinstance(h, Node) else gm.graph.inserting_after(t):
                node = halves[t, h] = gm.graph.call_function(aten.slice.Tensor, (t, -1, 0, h))
            node.meta["val"] = aten.slice.Tensor(_val(t), -1, 0, _size(h))
        return halves[t, h]

    for cat in list(gm.graph.nodes):
        if not _is(cat, aten.cat.default) or _erased(cat) or len(cat.args[0]) != 2:
            continue
        neg, first = cat.args[0]
        if not (_is(neg, aten.neg.default) and len(neg.users) == 1):
            continue
        second = neg.args[0]
        s1, s2 = _slice_of(first), _slice_of(second)
        if s1 is None or s2 is None or s1[0] is not s2[0] or len(first.users) != 1 or len(second.users) != 1:
            continue
        x = s1[0]
        x_val = _val(x)
        if x_val is None or x_val.dim() == 0:
            continue
        last, h, h_val = x_val.dim() - 1, s1[3], _size(s1[3])
        dims = (cat.args[1] if len(cat.args) > 1 else 0, s1[1], s2[1])
        if not all(d in (-1, last) for d in dims) or s1[2] != 0 or h_val is None or not _same(_size(s2[2]), h_val):
            continue
        end = s2[3]
        if not _same(x_val.shape[-1], 2 * h_val) or not (end is None or type(end) is int and end >= 2 ** 62
                                                            or _same(_size(end), x_val.shape[-1])):
            continue
        mul_sin = _only_user(cat)
        if not (_is(mul_sin, aten.mul.Tensor) and len(mul_sin.args) == 2 and not mul_sin.kwargs):
            continue
        add = _only_user(mul_sin)
        if not (_is(add, aten.add.Tensor) and len(add.args) == 2 and not add.kwargs):
            continue
        mul_cos, sin = _other(add, mul_sin), _other(mul_sin, cat)
        if not (_is(mul_cos, aten.mul.Tensor) and len(mul_cos.args) == 2 and x in mul_cos.args
                and len(mul_cos.users) == 1 and not mul_cos.kwargs):
            continue
        cos, out = _other(mul_cos, x), _val(add)
        cos_val, sin_val = _val(cos), _val(sin)
        if cos_val is None or sin_val is None or out is None or out.dim() != x_val.dim():
            continue
        if not all(_same(a, b) for a, b in zip(out.shape, x_val.shape, strict=True)):
            continue  # cos/sin broadcast to x, never x to them
        if len({out.dtype, x_val.dtype, cos_val.dtype, sin_val.dtype}) != 1 or cos_val.dim() > x_val.dim():
            continue
        if not (_same(cos_val.shape[-1], 2 * h_val) and _same(sin_val.shape[-1], 2 * h_val)):
            continue
        if not (_halves_equal(cos) and _halves_equal(sin)):
            continue
        args = (x, half_of(cos, h, cat), half_of(sin, h, cat))
        _replace(gm, add, torch.ops.dicp.rotary.default, args, [add, mul_sin, mul_cos, cat, neg, second, first])
        count += 1
    return _finish(gm, count)


def fold_matmul_views(gm: GraphModule) -> int:
    """``view(mm(view(x, (M, K)), w), (*lead, N))`` with ``x`` of shape ``(*lead, K)`` (``nn.Linear`` on a 3-d
    input, as AOTAutograd flattens it): ``aten.matmul(x, w)``, for a vendor whose matrix product takes leading
    batch dimensions (it saves the reshapes, and a copy where the result is a graph output). Not a fused
    operator, so not in :data:`ALL_PASSES`: a vendor opts in."""
    views = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)
    count = 0
    for mm in list(gm.graph.nodes):
        if not _is(mm, aten.mm.default) or _erased(mm) or mm.kwargs:
            continue
        flat, w = mm.args
        out = _only_user(mm)
        if not (_is(flat, *views) and len(flat.users) == 1 and _is(out, *views)):
            continue
        x = flat.args[0]
        x_val, out_val, mm_val = _val(x), _val(out), _val(mm)
        if x_val is None or out_val is None or mm_val is None or x_val.dim() < 3 or out_val.dim() != x_val.dim():
            continue
        if not all(_same(a, b) for a, b in zip((*x_val.shape[:-1], mm_val.shape[1]), out_val.shape, strict=True)):
            continue
        _replace(gm, out, aten.matmul.default, (x, w), [out, mm, flat])
        count += 1
    return _finish(gm, count)


def _same(a: object, b: object) -> bool:
    """``a == b`` for sizes, decided without adding a guard (an unknown symbolic answer is False)."""
    return statically_known_true(a == b)


#: Every pass of this module, in the order a vendor should run them.
ALL_PASSES: tuple[Callable[[GraphModule], int], ...] = (fuse_rms_norm, fuse_silu_mul, fuse_rotary,
                                                      fuse_attention)
