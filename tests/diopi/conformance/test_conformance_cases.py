"""Config expansion (ids, values, layouts, dtype skips, in-place variants, binding) and call recording."""

from __future__ import annotations

import pytest
import torch

from diopi.conformance.cases import ConfigError, build_call, build_inputs, expand, resolve_op
from diopi.conformance.recording import record
from diopi.conformance.spec import Config, Input, Values
from diopi.conformance.suite import load_suite

ADD = Config("diopiAdd", op="add.Tensor", inputs={"self": Input(), "other": Input()},
             shapes=[((2, 3), (2, 3)), ((), ()), ((0, 3), (3,)), ((3, 1), (3, 4))], params={"alpha": [1, 2]},
             dtypes=(torch.float32, torch.int64), inplace="add_.Tensor")


def _tensors(spec):
    op, args, kwargs = build_call(spec)
    return op, [a for a in args if isinstance(a, torch.Tensor)], kwargs


def test_ids_are_numbered_in_order_and_values_are_seeded_by_id():
    specs = expand(ADD)
    assert [s.id for s in specs] == [f"diopiAdd/{i:04d}" for i in range(len(specs))]
    assert [s.id for s in expand(ADD)] == [s.id for s in specs]
    a, b = build_inputs(specs[5]), build_inputs(specs[5])
    assert torch.equal(a["self"], b["self"]) and torch.equal(a["other"], b["other"])
    assert not torch.equal(build_inputs(specs[0])["self"], build_inputs(specs[2])["self"])


def test_layouts_keep_values_and_change_the_layout():
    specs = [s for s in expand(ADD) if s.shapes == ((2, 3), (2, 3)) and not s.inplace
             and s.dtype == torch.float32 and s.param_dict()["alpha"] == 1]
    by_layout = {s.layout: s for s in specs}
    assert set(by_layout) == {"contiguous", "noncontiguous", "offset"}
    _, (x, y), _ = _tensors(by_layout["noncontiguous"])
    assert not x.is_contiguous() and x.shape == (2, 3) and x.stride() == (6, 2)
    _, (x, y), _ = _tensors(by_layout["offset"])
    assert x.is_contiguous() and x.storage_offset() == 3 and y.storage_offset() == 3


def test_zero_dim_and_empty_shapes_expand_and_noncontiguous_is_left_out_where_impossible():
    specs = expand(ADD)
    scalar = [s for s in specs if s.shapes == ((), ())]
    assert {s.layout for s in scalar} == {"contiguous", "offset"}
    _, (x, _), _ = _tensors(scalar[0])
    assert x.dim() == 0
    empty = [s for s in specs if s.shapes == ((0, 3), (3,))]
    assert {s.layout for s in empty} == {"contiguous", "noncontiguous", "offset"}  # `other` has one
    _, (x, _), _ = _tensors(empty[0])
    assert x.shape == (0, 3)


def test_params_product_and_inplace_variants():
    specs = expand(ADD)
    assert {s.param_dict()["alpha"] for s in specs} == {1, 2}
    inplace = [s for s in specs if s.inplace]
    assert inplace and all(s.op_name == "add_.Tensor" for s in inplace)
    # add_ cannot write a (3, 4) result into a (3, 1) self: no in-place case for that group
    assert not [s for s in inplace if s.shapes == ((3, 1), (3, 4))]
    assert [s for s in specs if s.shapes == ((3, 1), (3, 4)) and not s.inplace]
    op, _, kwargs = _tensors(inplace[0])
    assert op is torch.ops.aten.add_.Tensor and kwargs == {"alpha": 1}


def test_value_kinds_and_dtypes_that_cannot_take_them_are_skipped():
    special = Config("diopiAdd", op="add.Tensor", inputs={"self": Input(), "other": Input()},
                     shapes=[((50, 40), (50, 40))], dtypes=(torch.float32, torch.int64), values=Values("special"))
    specs = expand(special)
    assert {s.dtype for s in specs} == {torch.float32}
    x = build_inputs(specs[0])["self"]
    assert x.isnan().any() and x.isinf().any() and (x == 0).any()
    positive = Config("diopiLog", op="log.default", inputs={"self": Input()}, shapes=[((1000,),)],
                      dtypes=(torch.float32,), values=Values("positive"), layouts=("contiguous",))
    x = build_inputs(expand(positive)[0])["self"]
    assert float(x.min()) >= 0.1 and float(x.max()) <= 4
    index = Config("diopiGather", op="gather.default",
                   inputs={"self": Input(), "index": Input(dtype=torch.int64, values=Values("index", high="dim:1"))},
                   shapes=[((3, 7), (3, 20))], params={"dim": [1]}, dtypes=(torch.float32,), layouts=("contiguous",))
    inputs = build_inputs(expand(index)[0])
    assert inputs["index"].dtype == torch.int64 and int(inputs["index"].max()) < 7 and int(inputs["index"].min()) >= 0


def test_list_of_inputs_and_optional_inputs():
    cat = Config("diopiCat", op="cat.default", inputs={"tensors": Input(list_of=3)},
                 shapes=[([(2, 3), (1, 3), (0, 3)],)], params={"dim": [0]}, dtypes=(torch.float32,),
                 layouts=("noncontiguous",))
    op, args, kwargs = build_call(expand(cat)[0])
    assert [tuple(t.shape) for t in args[0]] == [(2, 3), (1, 3), (0, 3)] and args[1] == 0
    assert not args[0][0].is_contiguous()
    norm = Config("diopiLayerNorm", op="native_layer_norm.default",
                  inputs={"input": Input(), "weight": Input(), "bias": Input()}, shapes=[((2, 4), (4,), (4,))],
                  params={"normalized_shape": [[4]], "eps": [1e-5], "bias=None": [False, True]},
                  dtypes=(torch.float32,), layouts=("contiguous",))
    with_bias, without = (build_call(s)[1] for s in expand(norm))
    assert isinstance(with_bias[3], torch.Tensor) and without[3] is None


def test_binding_errors_name_the_function_and_argument():
    bad = Config("diopiAdd", op="add.Tensor", inputs={"self": Input(), "othr": Input()}, shapes=[((2,), (2,))],
                 dtypes=(torch.float32,), layouts=("contiguous",))
    with pytest.raises(ConfigError, match=r"diopiAdd: aten.add.Tensor has no argument 'othr'"):
        build_call(expand(bad)[0])
    missing = Config("diopiAdd", op="add.Tensor", inputs={"self": Input()}, shapes=[((2,),)],
                     dtypes=(torch.float32,), layouts=("contiguous",))
    with pytest.raises(ConfigError, match=r"diopiAdd: aten.add.Tensor needs argument 'other'"):
        build_call(expand(missing)[0])
    with pytest.raises(ConfigError, match=r"diopiSub: op: aten.add.Tensor is served by diopiAdd, not diopiSub"):
        load_suite(families=(), extra=[Config("diopiSub", op="add.Tensor", inputs={"self": Input()},
                                              shapes=[((2,),)])])
    with pytest.raises(ConfigError, match=r"diopiNoSuch: function: no DIOPI function"):
        load_suite(families=(), extra=[Config("diopiNoSuch", op="add.Tensor")])
    with pytest.raises(ConfigError, match=r"diopiAdd: op: operator 'nosuch.Tensor'"):
        load_suite(families=(), extra=[Config("diopiAdd", op="nosuch.Tensor")])
    with pytest.raises(ConfigError, match=r"diopiAdd: shapes: empty"):
        load_suite(families=(), extra=[Config("diopiAdd", op="add.Tensor", inputs={"self": Input()})])
    with pytest.raises(ConfigError, match=r"diopiAdd: params: 'bias=None' names no input"):
        load_suite(families=(), extra=[Config("diopiAdd", op="add.Tensor", inputs={"self": Input()},
                                              shapes=[((2,),)], params={"bias=None": [True]})])


def test_resolve_op_forms():
    assert resolve_op("add.Tensor") is torch.ops.aten.add.Tensor
    assert resolve_op("aten.add.Tensor") is torch.ops.aten.add.Tensor
    assert resolve_op("aten::silu") is torch.ops.aten.silu.default


def test_recording_keeps_the_calls_of_one_function_with_their_layout():
    x = torch.randn(2, 8)[:, ::2]
    w, b = torch.randn(4), torch.randn(4)
    calls = record("diopiLayerNorm", lambda: torch.nn.functional.layer_norm(x, (4,), w, b))
    assert len(calls) == 1 and calls[0].op is torch.ops.aten.native_layer_norm.default
    recorded = calls[0].args[0]
    assert recorded is not x and recorded.stride() == x.stride() and torch.equal(recorded, x)
    assert record("diopiSilu", lambda: torch.nn.functional.layer_norm(x, (4,), w, b)) == []
