"""An operator that fails inside backward() raises a Python error; it must not abort the process."""

from __future__ import annotations

import pytest

FAIL_IN_BACKWARD = """
import torch, torch_dipu
from torch_dipu.vendors import droplet
x = torch.randn(64, 256, device="dipu", requires_grad=True)
layer = {layer}.dipu()
loss = layer(x).sum()
torch.dipu.empty_cache()  # the capacity counts what the caching allocator reserved: none cached
droplet.configure(memory_capacity=torch.dipu.memory_reserved() + 512)  # room for the seed gradient only
try:
    loss.backward()
    print("NO ERROR")
except RuntimeError as e:
    print("ERROR", str(e).replace("\\n", " "))
print("KEPT", type(torch_dipu.backward_errors()[-1]).__name__)
droplet.configure(memory_capacity="16GiB")
(x * 2).sum().backward()
print("ALIVE", x.grad.shape == x.shape)
"""


@pytest.mark.parametrize("layer", ["torch.nn.Linear(256, 256)", "torch.nn.LayerNorm(256)"])
def test_out_of_memory_inside_backward_is_an_exception(run_python, layer: str) -> None:  # noqa: ANN001
    out = run_python(FAIL_IN_BACKWARD.format(layer=layer)).stdout  # check=True: the process exits 0
    assert "failed during backward: OutOfMemoryError: DIPU out of memory" in out
    assert "KEPT OutOfMemoryError" in out
    assert "ALIVE True" in out
