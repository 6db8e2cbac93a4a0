"""diopi.adaptor: a fake vendor whose kernels reject int64/float64 inputs (or want NHWC) gives the reference
results once wrapped by a conversion config; malformed configs name the file, the function and the key."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import torch

import diopi.impls
from diopi import get_function
from diopi.adaptor import AdaptedImpl, AdaptorConfigError, adapt, load_config
from diopi.impls import FunctionImpls

aten = torch.ops.aten
REJECTED = (torch.int64, torch.float64)

CONFIG = """
all:
  dtypes: {int64: int32, float64: float32}
functions:
  diopiConvolution:
    memory_format: channels_last
  diopiCum.*:            # a regular expression; an exception for cumsum/cumprod below
    dtypes: {int64: int32}
exclude: [diopiSub]
"""


def _strict(op, *args, **kwargs):
    """A chip without 64-bit dtypes: it raises on an int64/float64 tensor or dtype argument."""
    for value in [*args, *kwargs.values()]:
        for item in value if isinstance(value, (list, tuple)) else [value]:
            dtype = item.dtype if isinstance(item, torch.Tensor) else item
            if isinstance(dtype, torch.dtype) and dtype in REJECTED:
                raise TypeError(f"fakechip: {op} does not take {dtype}")
    return op(*args, **kwargs)


def _nhwc_only(op, x, weight, *args):
    """A chip whose convolution reads its input in channels_last order only."""
    if not x.is_contiguous(memory_format=torch.channels_last) or x.is_contiguous():
        raise TypeError("fakechip: convolution wants channels_last input")
    return op(x, weight, *args)


FUNCTIONS = ["diopiAdd", "diopiMul", "diopiSub", "diopiIndexSelect", "diopiSum", "diopiCumsum", "diopiMaskedSelect",
             "diopiMax", "diopiMean"]


def fake_vendor(adaptor_config: str | None = None) -> FunctionImpls:
    kernels = {name: _strict for name in FUNCTIONS} | {"diopiConvolution": _nhwc_only}
    return FunctionImpls("fakechip", kernels, adaptor_config=adaptor_config)


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "convert_config.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def adapted(config_path: Path) -> AdaptedImpl:
    return adapt(fake_vendor(), load_config(config_path))


def _call(impl, function: str, op, *args, **kwargs):
    return impl.kernel(get_function(function), op)(op, *args, **kwargs)


def _ints(*shape: int, high: int = 100) -> torch.Tensor:
    return torch.randint(-high, high, shape, generator=torch.Generator().manual_seed(1))


CASES = [
    ("diopiAdd", aten.add.Tensor, lambda: (_ints(4, 5), _ints(4, 5)), {"alpha": 3}),
    ("diopiAdd", aten.add.Tensor, lambda: (_ints(4, 5).double(), torch.rand(4, 5, dtype=torch.float64)), {}),
    ("diopiMul", aten.mul.Tensor, lambda: (_ints(3, 1), _ints(1, 6)), {}),
    ("diopiIndexSelect", aten.index_select.default, lambda: (_ints(6, 4), 0, torch.tensor([5, 0, 2, 2])), {}),
    ("diopiSum", aten.sum.default, lambda: (_ints(5, 7),), {}),
    ("diopiSum", aten.sum.dim_IntList, lambda: (_ints(5, 7), [1]), {"dtype": torch.int64}),
    ("diopiCumsum", aten.cumsum.default, lambda: (_ints(4, 6), 1), {}),
    ("diopiMax", aten.max.dim, lambda: (_ints(4, 6), 1), {}),
    ("diopiMean", aten.mean.dim, lambda: (torch.rand(4, 6, dtype=torch.float64), [0]), {}),
    ("diopiMaskedSelect", aten.masked_select.default, lambda: (_ints(4, 6), _ints(4, 6) > 0), {}),  # no meta kernel
]


@pytest.mark.parametrize(("function", "op", "make", "kwargs"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_converted_calls_match_the_reference(adapted: AdaptedImpl, function, op, make, kwargs) -> None:
    args = make()
    with pytest.raises(TypeError, match="fakechip"):  # the bare vendor cannot run it
        _call(fake_vendor(), function, op, *args, **kwargs)
    expected = op(*args, **kwargs)
    result = _call(adapted, function, op, *args, **kwargs)
    for got, want in zip(result if isinstance(result, tuple) else [result],
                         expected if isinstance(expected, tuple) else [expected], strict=True):
        assert got.dtype == want.dtype  # cast back to what the caller expects
        if want.dtype == torch.float64:  # computed in float32
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        else:
            assert torch.equal(got, want)
    if isinstance(expected, tuple):
        assert type(result) is type(expected)


def test_in_place_and_out_arguments_are_written_back(adapted: AdaptedImpl) -> None:
    x, y = _ints(4, 5), _ints(4, 5)
    want = x + 2 * y
    result = _call(adapted, "diopiAdd", aten.add_.Tensor, x, y, alpha=2)
    assert result is x and x.dtype == torch.int64 and torch.equal(x, want)
    out = torch.empty(4, 5, dtype=torch.int64)
    result = _call(adapted, "diopiAdd", aten.add.out, x, y, out=out)
    assert result is out and torch.equal(out, want + y)


def test_channels_last_rule_on_convolution(adapted: AdaptedImpl) -> None:
    g = torch.Generator().manual_seed(2)
    x, w, b = torch.randn(2, 3, 8, 8, generator=g), torch.randn(4, 3, 3, 3, generator=g), torch.randn(4, generator=g)
    args = (x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    with pytest.raises(TypeError, match="channels_last"):
        _call(fake_vendor(), "diopiConvolution", aten.convolution.default, *args)
    result = _call(adapted, "diopiConvolution", aten.convolution.default, *args)
    expected = aten.convolution.default(*args)
    torch.testing.assert_close(result, expected)
    assert result.is_contiguous() and x.is_contiguous()  # the layout the op gives for the caller's input


def test_per_function_exceptions(tmp_path: Path, adapted: AdaptedImpl) -> None:
    # exclude: no conversion for diopiSub
    with pytest.raises(TypeError, match="fakechip"):
        _call(adapted, "diopiSub", aten.sub.Tensor, _ints(3), _ints(3))
    # a function entry replaces all's dtypes: cumsum converts int64, not float64
    with pytest.raises(TypeError, match="float64"):
        _call(adapted, "diopiCumsum", aten.cumsum.default, torch.rand(5, dtype=torch.float64), 0)
    # keep: the index goes to the kernel as it is
    path = tmp_path / "keep.yaml"
    path.write_text("all: {dtypes: {int64: int32}}\nfunctions: {diopiIndexSelect: {keep: [index]}}\n")
    seen: list[torch.dtype] = []
    impl = FunctionImpls("recorder", {"diopiIndexSelect": lambda op, x, dim, index: seen.extend([x.dtype, index.dtype])
                                      or op(x, dim, index)})
    result = _call(adapt(impl, path), "diopiIndexSelect", aten.index_select.default, _ints(4, 2), 0, torch.tensor([1]))
    assert seen == [torch.int32, torch.int64] and result.dtype == torch.int64


def test_load_applies_a_shipped_config(monkeypatch: pytest.MonkeyPatch, config_path: Path) -> None:
    real = list(diopi.impls.entry_points(group=diopi.impls.GROUP))
    fake = EntryPoint("fakechip", f"{__name__}:fake_vendor", diopi.impls.GROUP)
    monkeypatch.setattr(diopi.impls, "entry_points", lambda group: [*real, fake])
    x, y = _ints(3, 3), _ints(3, 3)
    impl = diopi.impls.load("fakechip", adaptor_config=str(config_path))
    assert isinstance(impl, AdaptedImpl) and impl.name == "fakechip" and impl.functions() == sorted(
        FUNCTIONS + ["diopiConvolution"])
    assert torch.equal(_call(impl, "diopiAdd", aten.add.Tensor, x, y), x + y)
    bare = diopi.impls.load("fakechip", apply_adaptor=False, adaptor_config=str(config_path))
    with pytest.raises(TypeError, match="fakechip"):
        _call(bare, "diopiAdd", aten.add.Tensor, x, y)


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("functions: {diopiAdd: {dtypes: {int65: int32}}}", ["function 'diopiAdd'", "key 'dtypes'", "'int65'"]),
        ("functions: {diopiAdd: {memory_format: nhwc}}", ["function 'diopiAdd'", "key 'memory_format'", "'nhwc'"]),
        ("functions: {diopiAdd: {keep: index}}", ["function 'diopiAdd'", "key 'keep'"]),
        ("functions: {diopiIndexSelect: {keep: [idx]}}", ["function 'diopiIndexSelect'", "key 'keep'", "'idx'"]),
        ("functions: {diopiAdd: {dtype: {int64: int32}}}", ["function 'diopiAdd'", "key 'dtype'", "unknown key"]),
        ("functions: {diopiNoSuch: {dtypes: {}}}", ["function 'diopiNoSuch'", "names no DIOPI function"]),
        ("functions: {'diopi(Add': {dtypes: {}}}", ["function 'diopi(Add'", "not a valid regular expression"]),
        ("exclude: [diopiNoSuch]", ["function 'diopiNoSuch'", "key 'exclude'"]),
        ("all: {dtypes: {int64: int32, int32: int16}}", ["all", "key 'dtypes'", "int32 is converted too"]),
        ("converts: {}", ["unknown key 'converts'"]),
        ("all: [int64]", ["all", "expected a mapping"]),
        ("all: {dtypes: [int64", ["not valid YAML"]),
    ],
)
def test_malformed_config_names_file_function_and_key(tmp_path: Path, text: str, parts: list[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(AdaptorConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    for part in parts:
        assert part in message, message


def test_missing_config_is_named(tmp_path: Path) -> None:
    with pytest.raises(AdaptorConfigError, match=r"missing\.yaml: cannot read adaptor config"):
        load_config(tmp_path / "missing.yaml")
