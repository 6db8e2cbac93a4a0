"""The DIOPI function table: every entry names real ATen operators that reach a device's kernels."""

from __future__ import annotations

import torch

import diopi


def test_every_mapped_packet_reaches_backend_kernels() -> None:
    # Every packet of the table reaches the vendor on dipu: an overload gets to the device as itself, or
    # torch_dipu claims the composite ones PyTorch would decompose before any device sees them (torch_dipu.claims).
    import torch_dipu

    report = torch_dipu.reachability()
    assert list(report) == [fn.name for fn in diopi.functions()]
    unreachable = [f"{p.function}: {p.packet} ({p.reason})" for packets in report.values() for p in packets
                   if not p.reachable]
    assert not unreachable, unreachable
    assert report["diopiSiluBackward"][0].routes == ("claimed", "dispatch")  # silu_backward is composite
    assert report["diopiMm"][0].routes == ("dispatch",)


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
