"""Every public name of ``torch.cuda`` (and its submodules) is mapped onto the vendor or refuses clearly.

The names come from ``torch.cuda`` itself, so a function a new PyTorch adds fails these tests until it is
classified. One subprocess (``import ditorch``'s mapping is process-wide) calls every name and reports.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from vendor_env import clean_env

from cuda_surface_check import surface_report  # tests/cuda_surface_check.py
from ditorch.mocking import cuda_derived, cuda_surface

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ditorch.md"


@pytest.fixture(scope="module")
def report() -> dict:
    return surface_report(clean_env(DITORCH_QUIET="1"))


def test_every_public_name_is_mapped_or_refuses_clearly(report: dict) -> None:
    assert report["problems"] == []
    kinds = report["kinds"]
    # The names the issue named, and the submodules, are all part of the surface.
    for name in ("get_rng_state", "random.get_rng_state", "memory.memory_allocated", "memory.max_memory_allocated",
                 "get_device_capability", "memory_summary", "memory.memory_snapshot", "device", "graphs.CUDAGraph",
                 "amp.autocast", "nvtx.range"):
        assert f"torch.cuda.{name}" in kinds, name
    assert kinds["torch.cuda.random.get_rng_state"] == "vendor" and kinds["torch.cuda.device"] == "derived"
    assert len(kinds) > 200
    # dipu's allocator keeps statistics: the only mapped name it cannot serve is the accumulated-counter reset
    refused_mapped = {q for q in report["refused"] if kinds[q] != "unsupported"}
    assert refused_mapped == {"torch.cuda.reset_accumulated_memory_stats",
                              "torch.cuda.memory.reset_accumulated_memory_stats"}


def test_unsupported_names_are_documented(report: dict) -> None:
    text = DOCS.read_text()
    section = text[text.index("### torch.cuda names without a counterpart"):]
    section = section[:section.index("\n## ")]
    listed = set(re.findall(r"`(torch\.cuda\.[\w.]+)`", section))
    unsupported = {q for q, kind in report["kinds"].items() if kind == "unsupported"}
    # A name torch.cuda re-exports from a submodule is listed once, under either name.
    short = {q: "torch.cuda." + q.rsplit(".", 1)[1] for q in unsupported}
    missing = {q for q in unsupported if q not in listed and short[q] not in listed}
    assert missing == set(), "add these to docs/ditorch.md"
    assert listed - unsupported == set(), "these are mapped now: remove them from docs/ditorch.md"


def test_same_name_means_same_object_across_submodules() -> None:
    """The mapping replaces by name: a name exported by two submodules must be one object in both."""
    seen: dict[str, object] = {}
    for _, module, name in cuda_surface.surface():
        if name in cuda_surface.KEPT:
            continue  # never replaced
        obj = getattr(module, name)
        if name in seen:
            assert seen[name] is obj, f"torch.cuda.*.{name} names two different objects"
        seen[name] = obj


def test_device_property_fields_match_torch_stubs() -> None:
    stub = (Path(torch.__file__).parent / "_C" / "__init__.pyi").read_text()
    block = stub[stub.index("class _CudaDeviceProperties:"):]
    block = block[:block.index("\n\n")]
    fields = re.findall(r"^\s+(\w+): ", block, flags=re.M)
    assert fields and set(fields) == set(cuda_derived.CUDA_PROPERTY_FIELDS)


def test_cuda_shaped_answers() -> None:
    code = """
        import io, contextlib, torch, ditorch
        p = torch.cuda.get_device_properties(0)
        assert (p.major, p.minor) == torch.cuda.get_device_capability() == torch.cuda.get_device_capability("cuda:0")
        assert p.total_memory == torch.dipu.mem_get_info(0)[1] and p.gcnArchName == "" and p.name
        assert "major=" in repr(p)
        assert isinstance(torch.cuda.device(0), torch.cuda.device)
        x = torch.empty(1024, device="cuda")
        for stats in (torch.cuda.memory_stats(), torch.cuda.memory.memory_stats()):
            assert stats["allocated_bytes.all.current"] == torch.cuda.memory_allocated() >= 4096
        assert torch.cuda.memory.memory_allocated() == torch.dipu.memory_allocated() >= 4096
        assert torch.cuda.memory.max_memory_allocated() == torch.dipu.max_memory_allocated()
        nested = torch.cuda.memory_stats_as_nested_dict()
        assert nested["allocated_bytes"]["all"]["current"] == torch.cuda.memory_allocated()
        summary = torch.cuda.memory_summary()
        assert "Allocated memory" in summary and "device ID 0" in summary
        torch.cuda.manual_seed(5); state = torch.cuda.random.get_rng_state(); a = torch.randn(3, device="cuda")
        torch.cuda.random.set_rng_state(state); assert torch.equal(a, torch.randn(3, device="cuda"))
        assert torch.equal(torch.cuda.random.get_rng_state(), torch.dipu.get_rng_state())
        with torch.cuda.device(x.device):  # a vendor device is accepted too
            assert torch.cuda.current_device() == 0
        with torch.profiler.profile() as prof:
            with torch.cuda.nvtx.range("my_block"):
                torch.ones(2, device="cuda") + 1
        assert "my_block" in {e.name for e in prof.events()}
        try:
            torch.cuda.CUDAGraph()
        except NotImplementedError as exc:
            assert "torch.cuda.CUDAGraph is not supported on dipu" in str(exc)
        g = torch.cuda.graphs.CUDAGraph
        assert not isinstance(x, g)
        print("OK")
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=clean_env(DITORCH_QUIET="1"),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout + result.stderr


def test_generic_and_derived_sources_are_documented() -> None:
    """docs/ditorch.md's tables of the names ditorch derives from PyTorch's device-generic APIs and builds in CUDA's
    shape are cuda_generic.SOURCES and cuda_derived.SOURCES, and every builder has its line."""
    from ditorch.mocking import cuda_generic

    text = DOCS.read_text()
    rows = re.findall(r"^  \| `(\w+)` \| (generic|derived) \| (.+) \|$", text, flags=re.M)
    assert {name: source for name, kind, source in rows if kind == "generic"} == cuda_generic.SOURCES
    assert {name: source for name, kind, source in rows if kind == "derived"} == cuda_derived.SOURCES
    assert set(cuda_derived.SOURCES) == set(cuda_derived.BUILDERS) | {"device", "device_of"}
    assert set(cuda_generic.SOURCES) >= set(cuda_generic.BUILDERS)
