"""The DIOPI function table: every entry names real ATen operators that reach a device's kernels."""

from __future__ import annotations

import torch

import diopi


def test_every_mapped_packet_reaches_backend_kernels() -> None:
    # A packet whose overloads are all CompositeImplicitAutograd decomposes before dispatch reaches a
    # device: a vendor kernel, a fault or a fallback entry for it would never take effect.
    unreachable = []
    for fn in diopi.functions():
        for packet in fn.aten:
            packet_op = getattr(torch.ops.aten, packet, None)
            assert packet_op is not None, f"{fn.name}: aten.{packet} does not exist"
            names = [f"aten::{packet}" + ("" if o == "default" else f".{o}") for o in packet_op.overloads()]
            if all(torch._C._dispatch_has_kernel_for_dispatch_key(n, "CompositeImplicitAutograd") for n in names):
                unreachable.append(f"{fn.name}: aten.{packet}")
    assert not unreachable, unreachable


def test_lookup_by_aten_overload_and_name() -> None:
    add = diopi.function_for_aten(torch.ops.aten.add_.Tensor)
    assert add is diopi.get_function("diopiAdd") is diopi.function_for_aten("aten.add.out")
    assert add.signature == "diopiAdd(Tensor self, Tensor other, number alpha)"
    assert diopi.function_for_aten("aten.mm").tags == frozenset({"matmul"})
    assert diopi.get_function("diopiDropout").is_random
    assert diopi.function_for_aten("aten.nonzero_static") is None
    assert len(list(diopi.functions())) == len(list(diopi.functions())) > 150


def test_unknown_function_error_names_it() -> None:
    try:
        diopi.get_function("diopiWarpDrive")
    except diopi.UnknownFunctionError as exc:
        assert "diopiWarpDrive" in str(exc)
    else:
        raise AssertionError("no error")
