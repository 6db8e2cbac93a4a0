"""dicp's bridge on ATen graphs made by ``make_fx`` (no dynamo: fast): partitioning into vendor and eager islands,
the eager-op report, passes, compile errors, the precision check, the cache's corrupt-entry handling."""

from __future__ import annotations

import json

import pytest
import torch
from bridge_fake_vendor import make_vendor
from compile_checks import assert_same
from torch.fx.experimental.proxy_tensor import make_fx

from dicp.config import reset_config
from dicp.dynamo_bridge import DicpCompileError, compile_graph, compile_report, fold_transposes, run_passes
from dicp.dynamo_bridge.cache import CompileCache

aten = torch.ops.aten


def mixed(x, w):
    """vendor ops, then cumsum (the fake vendor lacks it), then vendor ops again."""
    y = torch.relu(x @ w) * 2
    z = torch.cumsum(y, 1)
    return (z.sin() + y).sum(1), z


def compiled(fn, *inputs, vendor=None, kind="inference", mode="fake"):
    gm = make_fx(fn, tracing_mode=mode)(*inputs)
    return compile_graph(vendor or make_vendor(), gm, inputs, kind)


def test_eager_island_between_vendor_islands(capsys):
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    calls = []
    gm = compiled(mixed, x, w, vendor=make_vendor(calls=calls))
    assert_same(gm(x, w), mixed(x, w))
    called = [str(n.target) for n in gm.graph.nodes if n.op == "call_module"]
    assert called == ["dicp_inference_island_0", "dicp_inference_island_1"]
    assert [n.target for n in gm.graph.nodes if n.op == "call_function" and "aten" in str(n.target)] == \
        [aten.cumsum.default]
    assert calls[0].startswith("compile:aten.mm.default,aten.relu.default,aten.mul.Tensor")
    assert calls[2].startswith("compile:aten.sin.default,aten.add.Tensor,aten.sum.dim_IntList")
    report = compile_report()["fake"]
    assert report["vendor_islands"] == 2 and report["eager_islands"] == 1
    assert report["eager_ops"] == {"aten.cumsum.default": 1} and report["graphs_inference"] == 1
    compiled(lambda t: torch.cumsum(t, 0) + torch.cumsum(t, 0) * 3, x)  # the same op again: no second line
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("dicp fake:")]
    assert lines == ["dicp fake: aten.cumsum.default has no conversion; runs eagerly (1 node)"]
    assert compile_report()["fake"]["eager_ops"] == {"aten.cumsum.default": 3}


def test_random_ops_and_symbolic_sizes_stay_outside_islands():
    x = torch.randn(5, 6)

    def f(t):
        noise = torch.rand_like(t)  # random: eager, so the generator's stream is the eager one's
        return (t * 2).view(t.shape[0] * t.shape[1]) + noise.view(-1)

    gm = compiled(f, x, mode="symbolic")
    report = compile_report()["fake"]
    assert report["eager_ops"] == {"aten.rand_like.default": 1}
    islands = [m for name, m in gm.named_children() if name.startswith("dicp_")]
    placeholders = [n.meta["val"] for n in islands[0]._island[0].graph.nodes if n.op == "placeholder"]
    assert any(isinstance(v, torch.SymInt) for v in placeholders)  # sizes arrive as plain inputs
    torch.manual_seed(0)
    out = gm(x)
    torch.manual_seed(0)
    assert_same(out, f(x))


def test_compile_error_names_vendor_node_and_op(monkeypatch, capsys):
    def fail_on_mul(gm):
        if any(n.target is aten.mul.Tensor for n in gm.graph.nodes):
            raise RuntimeError("the chip has no multiplier")

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    # default: the failure is printed once and the island runs eagerly; the model gives eager's results
    for _ in range(2):
        gm = compiled(mixed, x, w, vendor=make_vendor("broken", compile_hook=fail_on_mul))
        assert_same(gm(x, w), mixed(x, w))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("dicp broken: compiling")]
    assert len(lines) == 1 and "node mul (aten.mul.Tensor)" in lines[0] and "the chip has no multiplier" in lines[0]
    assert lines[0].endswith("the island runs eagerly (DICP_STRICT=1 raises instead)")
    report = compile_report()["broken"]
    assert report["compile_failures"] == 2 and report["eager_nodes"] > 2  # the failed islands ran eagerly

    monkeypatch.setenv("DICP_STRICT", "1")
    reset_config()
    with pytest.raises(DicpCompileError) as info:
        compiled(mixed, x, w, vendor=make_vendor("broken", compile_hook=fail_on_mul))
    message = str(info.value)
    assert "dicp broken" in message and "node mul (aten.mul.Tensor)" in message
    assert "the chip has no multiplier" in message
    assert isinstance(info.value.__cause__, RuntimeError)

    with pytest.raises(DicpCompileError, match=r"dicp late: loading the inference graph failed at node mul "
                                               r"\(aten\.mul\.Tensor\): RuntimeError: the chip has no multiplier"):
        compiled(mixed, x, w, vendor=make_vendor("late", load_hook=fail_on_mul))


def test_precision_check_catches_a_wrong_conversion(monkeypatch, capsys):
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    wrong = make_vendor("wrong", wrong={aten.mul.Tensor: torch.add})  # its mul adds
    gm = compiled(mixed, x, w, vendor=wrong)
    gm(x, w)  # no switch: nothing checked, nothing reported
    assert compile_report()["wrong"]["precision_checks"] == 0
    assert "dicp precision" not in capsys.readouterr().err

    monkeypatch.setenv("DICP_PRECISION_CHECK", "1")
    reset_config()
    gm = compiled(mixed, x, w, vendor=wrong)
    out = gm(x, w)
    report = compile_report()["wrong"]
    assert report["precision_mismatches"] == 1 and report["precision_checks"] == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("dicp precision")]
    assert len(lines) == 1
    assert "wrong inference island [aten.mm.default, aten.relu.default, aten.mul.Tensor]" in lines[0]
    assert "out[0] FAIL: max abs error" in lines[0]
    y = torch.relu(x @ w) + 2  # the vendor's (wrong) result is still the one returned
    assert_same(out[1], torch.cumsum(y, 1))


def test_fold_transposes():
    x = torch.randn(2, 3, 4)

    def f(t):
        a = t.transpose(0, 1).transpose(0, 1)  # cancel
        b = t.permute(2, 0, 1).permute(2, 0, 1)  # composes into one permute
        return a * 2, b.t() if b.dim() == 2 else b + 1

    gm = make_fx(f, tracing_mode="fake")(x)
    counts = run_passes(gm, [fold_transposes])
    assert counts == {"fold_transposes": 2}
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(aten.permute.default) == 1 and aten.transpose.int not in targets
    assert_same(list(gm(x)), list(f(x)))


def test_corrupt_cache_entries_are_not_trusted(tmp_path):
    cache = CompileCache(tmp_path, "fake")
    assert cache.lookup("k") == ("miss", None)
    cache.store("k", b"artifact", {"why": "test"})
    assert cache.lookup("k") == ("hit", b"artifact")
    (tmp_path / "fake" / "k.bin").write_bytes(b"artifacT")  # same size, other checksum
    assert cache.lookup("k") == ("corrupt", None)
    (tmp_path / "fake" / "k.bin").write_bytes(b"art")  # truncated
    assert cache.lookup("k") == ("corrupt", None)
    cache.store("k", b"artifact", {})
    (tmp_path / "fake" / "k.json").write_text("{not json")
    assert cache.lookup("k") == ("corrupt", None)
    assert json.loads(json.dumps(compile_report())) == {}


def test_islands_create_no_cycle_and_keep_order():
    """An eager op reads the island's first value before the island's last node: the island is called before
    it (stable re-sort), and a vendor node that depends on the eager op goes to a second island."""
    x = torch.randn(3, 4)

    def f(t):
        y = t * 2
        z = torch.cumsum(y, 0)
        w = y + 1
        return z * w

    gm = compiled(f, x)
    assert compile_report()["fake"]["vendor_islands"] == 2
    order = [str(n.target) for n in gm.graph.nodes if n.op in ("call_module", "call_function")]
    assert order.index("dicp_inference_island_0") < order.index("aten.cumsum.default")
    assert_same(gm(x), f(x))


def test_cache_off(monkeypatch, tmp_path):
    monkeypatch.setenv("DICP_CACHE", "0")
    reset_config()
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    assert_same(compiled(mixed, x, w)(x, w), mixed(x, w))
    report = compile_report()["fake"]
    assert report["cache_hits"] == report["cache_misses"] == report["cache_rebuilt"] == 0
    assert not (tmp_path / "dicp_cache").exists()


def test_random_means_a_draw_happens():
    """Dropout with p=0 or train=False (e.g. attention's dropout_p=0.0) is not random: a vendor may convert it."""
    from dicp.dynamo_bridge.partition import _is_random

    def f(t):
        return (torch.ops.aten.native_dropout(t, 0.5, False)[0], torch.ops.aten.native_dropout(t, 0.0, True)[0],
                torch.ops.aten.native_dropout(t, 0.5, True)[0], torch.rand_like(t))

    gm = make_fx(f, tracing_mode="fake")(torch.randn(2, 3))
    randomness = [_is_random(n) for n in gm.graph.nodes
                  if n.op == "call_function" and n.target in (aten.native_dropout.default, aten.rand_like.default)]
    assert randomness == [False, False, True, True]
