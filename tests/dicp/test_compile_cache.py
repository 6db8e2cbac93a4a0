"""The compile cache key is the same in every process: the onnxgraph vendor's artifacts are reused by a second
process (hash randomization differing), and the converters' digest changes when a converter does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from dicp.dynamo_bridge.conversion import ConversionRegistry, _name

aten = torch.ops.aten

COMPILE_ONCE = textwrap.dedent("""
    import json
    import torch
    from dicp.dynamo_bridge import compile_report
    from dicp.vendor.onnxgraph import vendor

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    with torch.no_grad():
        out = torch.compile(model, backend="onnxgraph")(x)
        torch.testing.assert_close(out, model(x))
    report = compile_report()["onnxgraph"]
    print(json.dumps({"hits": report["cache_hits"], "misses": report["cache_misses"],
                      "rebuilt": report["cache_rebuilt"], "conversions": vendor().conversions.version()}))
""")


def _compile_in_a_new_process(cache_dir, hash_seed: str) -> dict:
    env = {**os.environ, "DICP_CACHE_DIR": str(cache_dir), "PYTHONHASHSEED": hash_seed}
    env.pop("DICP_CACHE", None)
    proc = subprocess.run([sys.executable, "-c", COMPILE_ONCE], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_onnxgraph_cache_hits_in_a_second_process(tmp_path):
    pytest.importorskip("onnxruntime")
    first = _compile_in_a_new_process(tmp_path / "cache", "1")
    second = _compile_in_a_new_process(tmp_path / "cache", "2")
    assert (first["hits"], first["misses"]) == (0, 1), first
    assert second["conversions"] == first["conversions"]
    assert (second["hits"], second["misses"], second["rebuilt"]) == (1, 0, 0), second


def _digest(*registrations) -> str:
    registry = ConversionRegistry("digest_test")
    for target, fn, supports in registrations:
        registry.register(target, supports=supports)(fn)
    return registry.version()


def _function(source: str, name: str):
    """A function compiled from ``source`` in this module's namespace (same qualified name for every source)."""
    namespace = {"__name__": __name__}
    exec(compile(source, __file__, "exec"), namespace)
    return namespace[name]


def test_conversions_digest_follows_the_converters():
    relu = _function('def conv(ctx, x):\n    return ctx.emit("Relu", [x])\n', "conv")
    relu_again = _function('def conv(ctx, x):\n    return ctx.emit("Relu", [x])\n', "conv")
    abs_ = _function('def conv(ctx, x):\n    return ctx.emit("Abs", [x])\n', "conv")

    def declines(reason):
        return lambda node: reason

    base = _digest((aten.relu.default, relu, None))
    assert _digest((aten.relu.default, relu_again, None)) == base  # the same code in another object
    assert _digest((aten.relu.default, abs_, None)) != base  # a changed body
    assert _digest((aten.abs.default, relu, None)) != base  # another target
    assert _digest((aten.relu.default, relu, declines("a"))) != base  # a supports= added
    assert _digest((aten.relu.default, relu, declines("a"))) != _digest((aten.relu.default, relu, declines("b")))


def test_higher_order_operator_named_without_an_address():
    auto_functionalized = getattr(torch.ops.higher_order, "auto_functionalized", None)
    if auto_functionalized is None:
        pytest.skip("no auto_functionalized in this torch")
    assert _name(auto_functionalized) == "higher_order.auto_functionalized"
    assert "0x" not in _name(object())
