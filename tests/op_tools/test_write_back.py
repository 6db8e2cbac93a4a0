"""op_tools.write_back: a call run on copies of its tensors, its writes copied back into the originals."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import torch_dipu  # noqa: F401  (registers the dipu device)
from op_tools import fallback
from op_tools.write_back import Substitution, cpu_copy, makes_view


def _clone(t: torch.Tensor) -> torch.Tensor:
    return t.clone()


def test_an_inplace_op_on_a_view_writes_through_to_the_base() -> None:
    base = torch.zeros(5)
    view = base[1:3]
    sub = Substitution()
    cargs, ckwargs = sub.swap((view, 2.0), {}, _clone)
    (copy,) = sub.copies.values()
    assert cargs[0] is copy and copy is not view and sub.origin[id(copy)] is view
    out = sub.run(torch.Tensor.add_, cargs, ckwargs)
    assert sub.written == [copy] and not sub.makes_view(out) and not sub.resized()
    assert torch.equal(base, torch.zeros(5))  # the call ran on the copy only
    sub.write_back()
    assert torch.equal(base, torch.tensor([0.0, 2.0, 2.0, 0.0, 0.0]))
    assert sub.restore(out, lambda t: t.neg()) is view  # add_ returns its input: the original comes back


def test_an_out_argument_is_written_back_and_returned() -> None:
    a, b, out = torch.tensor([1.0, 2.0]), torch.tensor([10.0, 20.0]), torch.zeros(2)
    sub = Substitution()
    cargs, ckwargs = sub.swap((a, b), {"out": out}, lambda t: t.double())
    assert ckwargs["out"].dtype == torch.float64 and sub.origin[id(ckwargs["out"])] is out
    result = sub.run(torch.add, cargs, ckwargs)
    assert sub.written == [ckwargs["out"]]  # the inputs were read, not written
    sub.write_back()
    assert out.dtype == torch.float32 and torch.equal(out, torch.tensor([11.0, 22.0]))
    assert torch.equal(a, torch.tensor([1.0, 2.0])) and torch.equal(b, torch.tensor([10.0, 20.0]))
    assert sub.restore(result, lambda t: t.float()) is out


def test_a_returned_input_maps_to_its_original_and_new_outputs_are_converted() -> None:
    x, kept = torch.arange(3.0), torch.ones(2)
    sub = Substitution()
    cargs, ckwargs = sub.swap((x, kept), {}, lambda t: t.double() if t.numel() == 3 else None)
    assert cargs[1] is kept and list(sub.copies) == [id(x)]  # None from make_copy: the tensor stays
    out = sub.run(lambda t, k: (t, t * 2, k, "text"), cargs, ckwargs)
    assert sub.written == []
    sub.write_back()
    same, doubled, other, text = sub.restore(out, lambda t: t.to(torch.float16))
    assert same is x and text == "text"
    assert doubled.dtype == torch.float16 and torch.equal(doubled, torch.tensor([0.0, 2.0, 4.0], dtype=torch.float16))
    assert other.dtype == torch.float16  # not a copy: converted like any new output


def test_a_tensor_passed_twice_gets_one_copy() -> None:
    x = torch.ones(3)
    sub = Substitution()
    cargs, _ = sub.swap((x, [x]), {}, _clone)
    assert cargs[0] is cargs[1][0] and len(sub.copies) == 1 and len(sub.origin) == 1


def test_batch_norm_running_stats_are_a_quiet_write() -> None:
    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(0))
    want_mean, want_var = torch.zeros(3), torch.ones(3)
    F.batch_norm(x, want_mean, want_var, training=True)

    for quiet in (False, True):
        mean, var = torch.zeros(3), torch.ones(3)
        sub = Substitution()
        cargs, ckwargs = sub.swap((x, mean, var), {"training": True}, lambda t: t.double())
        sub.run(F.batch_norm, cargs, ckwargs, quiet=quiet)
        sub.write_back()
        if quiet:  # found by value: both statistics land in the originals
            assert [sub.origin[id(c)] for c in sub.written] == [mean, var]
            torch.testing.assert_close(mean, want_mean)
            torch.testing.assert_close(var, want_var)
        else:  # the version counters did not move: nothing written back
            assert sub.written == []
            assert torch.equal(mean, torch.zeros(3)) and torch.equal(var, torch.ones(3))


def test_quiet_writes_skip_copies_requiring_grad() -> None:
    w = torch.ones(3, requires_grad=True)
    sub = Substitution()
    cargs, ckwargs = sub.swap((w,), {}, lambda t: t.detach().clone().requires_grad_())
    sub.run(lambda t: t.data.mul_(2), cargs, ckwargs, quiet=True)  # a write no version counter sees
    assert sub.written == []


def test_a_view_of_a_copy_is_detected() -> None:
    x = torch.arange(6.0)
    sub = Substitution()
    cargs, ckwargs = sub.swap((x, 2, 3), {}, _clone)
    out = sub.run(torch.Tensor.view, cargs, ckwargs)
    assert sub.makes_view(out) and makes_view([out], sub.origin)

    sub = Substitution()
    cargs, ckwargs = sub.swap((x,), {}, _clone)
    alias = sub.run(torch.Tensor.detach, cargs, ckwargs)  # no _base, but the copy's storage
    assert not sub.makes_view(alias) and sub.makes_view(alias, shared_storage=True)

    sub = Substitution()
    cargs, ckwargs = sub.swap((x,), {}, _clone)
    new = sub.run(torch.Tensor.add, (*cargs, 1), ckwargs)
    assert not sub.makes_view(new, shared_storage=True)
    assert not sub.makes_view(cargs[0])  # a returned copy is the original, not a view


def test_a_resized_copy_is_reported() -> None:
    x = torch.zeros(4)
    sub = Substitution()
    cargs, ckwargs = sub.swap((x, (2, 3)), {}, _clone)
    sub.run(torch.Tensor.resize_, cargs, ckwargs)
    assert sub.written and sub.resized()


def test_recopy_keeps_the_originals() -> None:
    h, other = torch.tensor([1.0, 2.0], dtype=torch.float16), torch.tensor([3.0], dtype=torch.float32)
    sub = Substitution()
    cargs, ckwargs = sub.swap((h, other), {}, _clone)
    first = cargs[0]
    cargs, ckwargs = sub.recopy(cargs, ckwargs,
                                lambda c: c.to(torch.float32) if c.dtype == torch.float16 else None)
    wide = cargs[0]
    assert wide.dtype == torch.float32 and sub.origin[id(wide)] is h and sub.origin[id(cargs[1])] is other
    assert sub.copies[id(h)] is first  # copies keeps the first copy of each original
    out = sub.run(torch.Tensor.mul_, (wide, 3.0), {})
    assert sub.written == [wide]
    sub.write_back()
    assert h.dtype == torch.float16 and torch.equal(h, torch.tensor([3.0, 6.0], dtype=torch.float16))
    assert sub.restore(out, lambda t: t) is h


def test_cpu_copy_keeps_strides_and_the_old_names_stay_importable() -> None:
    t = torch.arange(6.0).reshape(2, 3).t()
    c = cpu_copy(t)
    assert c.stride() == t.stride() and torch.equal(c, t) and c.data_ptr() != t.data_ptr()
    e = torch.ones(3, 1).to("dipu").expand(3, 4)  # overlapping elements: copied contiguously
    ce = cpu_copy(e)
    assert ce.device.type == "cpu" and ce.is_contiguous() and torch.equal(ce, torch.ones(3, 4))
    assert fallback.cpu_copy is cpu_copy and fallback.makes_view is makes_view
