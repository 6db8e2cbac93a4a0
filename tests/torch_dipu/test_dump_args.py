"""``DIPU_DUMP_OP_ARGS`` / ``torch_dipu.set_dump_op_args``: the printed lines, run-time switching, and the
``os.environ`` watcher behind it (torch_dipu.env_watch)."""

from __future__ import annotations

import contextlib
import io
import os

import pytest
import torch
from test_workflows import make_batches, mlp, train

import torch_dipu
from torch_dipu import dispatch, dump_args, env_watch
from torch_dipu.dump_args import set_dump_op_args

VAR = "DIPU_DUMP_OP_ARGS"


@pytest.fixture(autouse=True)
def dump_off(monkeypatch):
    """Each test starts and ends at level 0 with the variable unset."""
    monkeypatch.setenv(VAR, "0")
    monkeypatch.delenv(VAR)  # undone in reverse: the variable ends as it began
    set_dump_op_args(0)
    yield
    set_dump_op_args(0)


@pytest.fixture
def x() -> torch.Tensor:
    return torch.arange(12, dtype=torch.float32).reshape(3, 4).sub(5.5).div(3).to("dipu")


def lines(capsys) -> list[str]:
    return capsys.readouterr().out.splitlines()


def tensor_line(op: str, name: str, t: torch.Tensor, **fields: object) -> str:
    """The line the dump prints for tensor ``t`` (``fields`` overrides what differs from ``t``'s metadata)."""
    values = {
        "numel": t.numel(), "sizes": list(t.shape), "stride": list(t.stride()), "storage_offset": t.storage_offset(),
        "is_view": int(t._is_view()), "dtype": t.dtype, "device": t.device, "layout": t.layout,
        "requires_grad": int(t.requires_grad), "data_ptr": f"0x{t.data_ptr():x}",
    }
    values.update(fields)
    return f"\t{op}: {name}:" + ", ".join(f"{k}:{v}" for k, v in values.items())


def printed_values(t: torch.Tensor) -> list[str]:
    """``t``'s values as ``print`` shows them (without ``tensor(`` and its indent), then the dump's footer."""
    text = repr(t.detach().cpu())[len("tensor("):-1]
    rows = [row.removeprefix(" " * len("tensor(")) for row in text.split("\n")]
    return rows + [f"[ {t.device} {t.dtype}{{{','.join(map(str, t.shape))}}} ]"]


def test_level_1_names_the_op_and_its_diopi_function(x, capsys):
    os.environ[VAR] = "1"
    y = x + x
    m = torch.mm(x, x.t())
    assert lines(capsys) == [
        "[dipu_add_Tensor]:add.Tensor  diopiAdd",
        "[dipu_t]:t  view (torch_dipu)",
        "[dipu_mm]:mm  diopiMm",
    ]
    assert torch.equal(y.cpu(), x.cpu() * 2) and m.shape == (3, 3)


def test_level_2_prints_every_argument_with_defaults_and_the_result(x, capsys):
    os.environ[VAR] = "2"
    y = x + 3
    assert lines(capsys) == [
        "[dipu_add_Tensor]:add.Tensor  diopiAdd",
        tensor_line("add.Tensor", "self", x),
        "\tadd.Tensor: other:3",
        "\tadd.Tensor: alpha:1",
        tensor_line("add.Tensor", "result", y),
    ]
    assert tensor_line("add.Tensor", "self", x).startswith(
        "\tadd.Tensor: self:numel:12, sizes:[3, 4], stride:[4, 1], storage_offset:0, is_view:0, dtype:torch.float32, "
        "device:dipu:0, layout:torch.strided, requires_grad:0, data_ptr:0x"
    )


def test_level_2_shows_views(x, capsys):
    set_dump_op_args(2)
    t = x.t()
    y = t + 1
    out = lines(capsys)
    assert out[0] == "[dipu_t]:t  view (torch_dipu)"
    add = out.index("[dipu_add_Tensor]:add.Tensor  diopiAdd")
    assert out[add + 1] == tensor_line("add.Tensor", "self", t, sizes=[4, 3], stride=[1, 4], is_view=1)
    assert out[add + 2:add + 4] == ["\tadd.Tensor: other:1", "\tadd.Tensor: alpha:1"]
    assert out[add + 4] == tensor_line("add.Tensor", "result", y)

    tail = x[1:]
    z = tail * 2.5
    out = lines(capsys)
    assert out[0] == "[dipu_slice_Tensor]:slice.Tensor  view (torch_dipu)"
    mul = out.index("[dipu_mul_Tensor]:mul.Tensor  diopiMul")
    assert out[mul + 1] == tensor_line("mul.Tensor", "self", tail, sizes=[2, 4], storage_offset=4, is_view=1)
    assert out[mul + 2:] == ["\tmul.Tensor: other:2.5", tensor_line("mul.Tensor", "result", z, storage_offset=0)]


def test_level_3_adds_the_values_as_torch_prints_them(x, capsys):
    set_dump_op_args(3)
    y = x * 3
    assert lines(capsys) == [
        "[dipu_mul_Tensor]:mul.Tensor  diopiMul",
        tensor_line("mul.Tensor", "self", x),
        *printed_values(x),
        "\tmul.Tensor: other:3",
        tensor_line("mul.Tensor", "result", y),
        *printed_values(y),
    ]
    assert printed_values(x)[-1] == "[ dipu:0 torch.float32{3,4} ]"
    assert printed_values(x)[0].startswith("[[-1.8333, -1.5000")


def test_fallback_and_tensor_lists(x, capsys):
    torch_dipu.set_force_fallback("add.Tensor")
    os.environ[VAR] = "1"
    x + x
    assert lines(capsys) == ["[dipu_add_Tensor]:add.Tensor  fallback to cpu (forced by DIPU_FORCE_FALLBACK_OPS_LIST)"]
    set_dump_op_args(2)
    c = torch.cat([x, x[:1]])
    out = lines(capsys)
    assert out[0] == "[dipu_slice_Tensor]:slice.Tensor  view (torch_dipu)"
    cat = out.index("[dipu_cat]:cat  diopiCat")
    assert out[cat + 1] == tensor_line("cat", "tensors[0]", x)
    assert out[cat + 2].startswith("\tcat: tensors[1]:numel:4, sizes:[1, 4], stride:[4, 1], storage_offset:0, "
                                   "is_view:1")
    assert out[cat + 3:] == ["\tcat: dim:0", tensor_line("cat", "result", c)]


def test_switching_at_run_time_takes_effect_on_the_next_op(x, capsys, monkeypatch):
    assert "dump" not in dispatch.handler_wrappers  # level 0 costs nothing
    x + x
    assert lines(capsys) == []
    os.environ[VAR] = "1"
    assert "dump" in dispatch.handler_wrappers
    x * x
    assert lines(capsys) == ["[dipu_mul_Tensor]:mul.Tensor  diopiMul"]
    os.environ[VAR] = "0"
    x * x
    assert lines(capsys) == [] and "dump" not in dispatch.handler_wrappers
    set_dump_op_args(1)
    x - x
    assert lines(capsys) == ["[dipu_sub_Tensor]:sub.Tensor  diopiSub"]
    set_dump_op_args(0)
    x - x
    assert lines(capsys) == []
    monkeypatch.setenv(VAR, "1")
    x + x
    del os.environ[VAR]
    x + x
    os.environ.setdefault(VAR, "1")
    x * x
    os.environ.pop(VAR)
    x * x
    assert lines(capsys) == ["[dipu_add_Tensor]:add.Tensor  diopiAdd", "[dipu_mul_Tensor]:mul.Tensor  diopiMul"]
    assert dump_args.dump_op_args() == 0


def test_bad_value_at_run_time_raises_and_keeps_the_level(x, capsys):
    set_dump_op_args(1)
    with pytest.raises(ValueError, match=r"DIPU_DUMP_OP_ARGS='7' is not a dump level \(expected 0-3.*stays 1"):
        os.environ[VAR] = "7"
    assert os.environ[VAR] == "7"  # os.environ keeps what was assigned
    with pytest.raises(ValueError, match=r"set_dump_op_args\(7\): not a dump level \(expected 0-3"):
        set_dump_op_args(7)
    with pytest.raises(ValueError, match=r"set_dump_op_args\('two'\)"):
        set_dump_op_args("two")
    x + x
    assert lines(capsys) == ["[dipu_add_Tensor]:add.Tensor  diopiAdd"]
    assert dump_args.dump_op_args() == 1


def test_level_at_import_and_bad_value_at_import(run_python):
    code = "import torch, torch_dipu\nx = torch.ones(2, device='dipu')\ny = x + x\n"
    proc = run_python(code, env={VAR: "1"})
    assert proc.stdout.splitlines()[-1] == "[dipu_add_Tensor]:add.Tensor  diopiAdd"
    proc = run_python(code, env={VAR: "7"}, check=False)
    assert proc.returncode != 0
    assert "ConfigError: DIPU_DUMP_OP_ARGS='7' is not a dump level (expected 0-3: 0: nothing;" in proc.stderr


def test_backward_ops_are_printed_when_switched_on_during_backward(x, capsys):
    w = torch.ones(3, 4, device="dipu", requires_grad=True)
    y = w * x
    y.register_hook(lambda grad: set_dump_op_args(2))  # switched on inside the backward pass
    y.sum().backward()
    out = lines(capsys)
    assert "[dipu_expand]:expand  view (torch_dipu)" not in out  # sum's backward ran before the hook
    mul = out.index("[dipu_mul_Tensor]:mul.Tensor  diopiMul")
    assert out[mul + 1].startswith("\tmul.Tensor: self:numel:12, sizes:[3, 4], stride:[0, 0], storage_offset:0")
    assert out[mul + 2] == tensor_line("mul.Tensor", "other", x)
    assert torch.equal(w.grad.cpu(), x.cpu())


def test_autocast_and_several_devices(four_dipu_devices, capsys):
    a = torch.ones(2, 3, device="dipu:1")
    set_dump_op_args(2)
    with torch.autocast("dipu", dtype=torch.float16):
        m = torch.mm(a, a.t())
    out = lines(capsys)
    mm = out.index("[dipu_mm]:mm  diopiMm")
    assert "dtype:torch.float16, device:dipu:1" in out[mm + 1]
    assert out[-1] == tensor_line("mm", "result", m)
    assert m.dtype == torch.float16 and m.device == torch.device("dipu:1")


def test_output_follows_sys_stdout_and_formatting_errors_never_break_the_op(x, capsys, monkeypatch):
    set_dump_op_args(2)
    with contextlib.redirect_stdout(io.StringIO()) as buffer:
        y = x + x
    assert buffer.getvalue().splitlines()[0] == "[dipu_add_Tensor]:add.Tensor  diopiAdd"
    assert lines(capsys) == []

    def broken(t: torch.Tensor, view: bool = False) -> str:
        raise RuntimeError("boom")

    monkeypatch.setattr(dump_args, "_tensor_text", broken)
    z = x + x
    assert lines(capsys) == [
        "[dipu_add_Tensor]:add.Tensor  diopiAdd",
        "\tadd.Tensor: argument dump failed: RuntimeError: boom",
        "\tadd.Tensor: result dump failed: RuntimeError: boom",
    ]
    assert torch.equal(z.cpu(), y.cpu())


def test_results_are_bitwise_unchanged_by_dumping(capsys):
    torch.manual_seed(0)
    plain = train(mlp(), "dipu", batches=make_batches(steps=2))
    set_dump_op_args(3)
    torch.manual_seed(0)
    dumped = train(mlp(), "dipu", batches=make_batches(steps=2))
    set_dump_op_args(0)
    out = lines(capsys)
    assert "[dipu_linear]:linear  diopiLinear" in out and len(out) > 200
    for group in ("params", "grads"):
        for name, value in plain[group].items():
            assert torch.equal(value.cpu(), dumped[group][name].cpu()), (group, name)
    assert torch.equal(plain["losses"].cpu(), dumped["losses"].cpu())


def test_env_watch_calls_back_on_every_change(monkeypatch):
    name = "DIPU_TEST_ENV_WATCH"
    monkeypatch.setenv(name, "0")
    monkeypatch.delenv(name)
    environ = os.environ
    seen: list[tuple[str, str | None]] = []
    handle = env_watch.watch(name, lambda n, v: seen.append((n, v)))
    try:
        assert os.environ is environ and isinstance(os.environ, os._Environ)
        os.environ[name] = "a"
        os.environ.update({name: "b"})
        monkeypatch.setenv(name, "c")
        del os.environ[name]
        os.environ["OTHER_DIPU_TEST_VAR"] = "x"
        del os.environ["OTHER_DIPU_TEST_VAR"]
        assert seen == [(name, "a"), (name, "b"), (name, "c"), (name, None)]

        def bad(n: str, v: str | None) -> None:
            raise ValueError(f"{n}={v!r} rejected")

        bad_handle = env_watch.watch(name, bad)
        with pytest.raises(ValueError, match="DIPU_TEST_ENV_WATCH='d' rejected"):
            os.environ[name] = "d"
        env_watch.unwatch(bad_handle)
        assert os.environ[name] == "d" and seen[-1] == (name, "d")  # stored; the other callback still ran
    finally:
        env_watch.unwatch(handle)
    os.environ[name] = "e"
    assert seen[-1] == (name, "d") and name not in env_watch.watched()
    assert env_watch.watched() == [VAR]  # dump_args keeps its watch
