"""The memory checker (``DIPU_MEM_CHECK``): leaks at exit with their allocating line, double frees, warnings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import torch_dipu
from torch_dipu import mem_check

LEAK = """\
import torch, torch_dipu
kept = []

def make(n):
    return torch.ones(n, device="dipu") * 2

for i in range(3):
    kept.append(make(1000))
scratch = torch.zeros(10, device="dipu")
del scratch
print("done")
"""

CLEAN = """\
import torch, torch_dipu

def main():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to("dipu")
    optimizer = torch.optim.AdamW(model.parameters())
    for _ in range(3):
        loss = model(torch.randn(4, 8, device="dipu")).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print("done", loss.item())

main()
"""


def run_script(run_python, tmp_path, text: str, **env: str):  # noqa: ANN001, ANN201
    script = tmp_path / "train.py"
    script.write_text(text)
    return run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')", env=env), script


def test_leak_is_reported_at_exit_with_its_allocating_line(run_python, tmp_path):
    out, script = run_script(run_python, tmp_path, LEAK, DIPU_MEM_CHECK="1")
    assert "done" in out.stdout
    lines = out.stderr.splitlines()
    assert "dipu memory checker: 3 blocks (12.00 KiB) not released" in lines
    assert lines.count(f"    {script}:5 in make") == 3  # the user's line, no torch / torch_dipu frame
    assert "DIPU_MEM_CHECK_ENABLE_BACKTRACE=1" in out.stderr
    assert ":9 " not in out.stderr, "the freed scratch tensor is no leak"


def test_backtrace_shows_the_whole_user_stack(run_python, tmp_path):
    out, script = run_script(run_python, tmp_path, LEAK, DIPU_MEM_CHECK="1", DIPU_MEM_CHECK_ENABLE_BACKTRACE="1")
    text = out.stderr
    entry = re.search(r"block 0x[0-9a-f]+ \(4.00 KiB\) on dipu:0, allocated at:\n(.*\n){4}", text).group(0)
    assert f"{script}:5 in make\n" in entry and "return torch.ones(n, device=\"dipu\") * 2" in entry
    assert f"{script}:8 in <module>\n" in entry and "kept.append(make(1000))" in entry
    assert "torch_dipu" not in text and "site-packages/torch/" not in text


def test_clean_run_prints_nothing(run_python, tmp_path):
    out, _ = run_script(run_python, tmp_path, CLEAN, DIPU_MEM_CHECK="1", DIPU_MEM_CHECK_ENABLE_BACKTRACE="1")
    assert out.stdout.startswith("done")
    assert out.stderr == ""


def test_max_block_warns_once_naming_the_top_line_and_log_interval_lines(run_python, tmp_path):
    code = """\
import torch, torch_dipu
many = [torch.empty(4, device="dipu") for _ in range(12)]
del many
"""
    out, script = run_script(run_python, tmp_path, code, DIPU_MEM_CHECK="1", DIPU_MEM_CHECK_MAX_BLOCK="5",
                             DIPU_MEM_CHECK_LOG_INTERVAL="4")
    warnings = [line for line in out.stderr.splitlines() if "DIPU_MEM_CHECK_MAX_BLOCK=5" in line]
    assert len(warnings) == 1
    assert warnings[0].startswith("dipu memory checker: 6 blocks alive, more than DIPU_MEM_CHECK_MAX_BLOCK=5")
    assert f"top allocating lines: {script}:2 (6 blocks)" in warnings[0]
    logs = [line for line in out.stderr.splitlines() if " allocations, " in line]
    assert logs == [f"dipu memory checker: {n} allocations, {n} blocks ({n // 2}.00 KiB) alive" for n in (4, 8, 12)]
    assert "not released" not in out.stderr


@pytest.fixture
def checker():
    started = mem_check.enable(backtrace=False)
    yield started
    mem_check.disable()


def test_double_free_names_the_address_and_where_it_was_allocated_and_freed(checker):
    address = torch.dipu.caching_allocator_alloc(1000)
    torch.dipu.caching_allocator_delete(address)  # first free: line below
    with pytest.raises(RuntimeError) as info:
        torch.dipu.caching_allocator_delete(address)
    message = str(info.value)
    assert hex(address) in message and "already freed" in message
    assert re.search(r"allocated at .*test_mem_check.py:\d+, first freed at .*test_mem_check.py:\d+", message)


def test_vendor_double_free_and_unknown_address_are_errors(checker):
    runtime = torch_dipu.runtime()
    address = runtime.raw_malloc(0, 4096)
    runtime.raw_free(0, address, 4096)
    with pytest.raises(RuntimeError, match=f"raw_free of address {hex(address)} .*first freed at"):
        runtime.raw_free(0, address, 4096)
    with pytest.raises(RuntimeError, match="dipu memory checker: raw_free of address 0x7 "):
        runtime.raw_free(0, 7, 512)


def test_live_blocks_and_report_in_process(checker):
    x = torch.ones(1000, device="dipu")
    mine = [b for b in mem_check.live_blocks() if b.where().endswith(f"test_mem_check.py:{_line_of('x = torch.ones')}")]
    assert [b.size for b in mine] == [4096]
    assert f"0x{mine[0].address:x} (4.00 KiB) on dipu:0" in mem_check.report()
    del x
    assert not [b for b in mem_check.live_blocks() if b.address == mine[0].address]


def test_cache_taken_before_the_checker_is_released_without_error(checker):
    torch.dipu.empty_cache()  # segments the allocator had before enable() go back to the vendor, checked
    assert torch.dipu.memory_reserved() == torch.dipu.memory_allocated()


def test_checker_leaves_results_unchanged(checker):
    torch.manual_seed(0)
    a = torch.randn(64, 64)
    checked = (a.to("dipu") @ a.to("dipu")).relu().sum().cpu()
    mem_check.disable()
    plain = (a.to("dipu") @ a.to("dipu")).relu().sum().cpu()
    assert torch.equal(checked, plain)


def _line_of(text: str) -> int:
    source = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(source, 1) if line.strip().startswith(text))


def test_a_free_from_a_shallow_stack_is_recorded_without_error(checker):
    # the garbage collector can free a block at exit with fewer frames on the stack than a call from user code has
    assert mem_check._user_frames(10_000, False) == []
    assert mem_check._user_frames(10_000, True) == []
