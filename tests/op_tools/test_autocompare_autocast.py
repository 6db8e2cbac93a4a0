"""OpAutoCompare under autocast: calls that write into their inputs are not cast by autocast, so their CPU
reference keeps the device's dtypes (batch norm's float32 running statistics next to a bfloat16 input)."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

import torch_dipu  # noqa: F401  (registers the dipu device)
from op_tools import OpAutoCompare


def test_batch_norm_under_bf16_autocast_is_judged_like_the_device_ran_it(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).to("dipu")
    x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(1)).to("dipu")
    with OpAutoCompare(ops="torch.nn.functional.batch_norm", results_dir=tmp_path, report=False) as tool, \
            torch.autocast("dipu", dtype=torch.bfloat16):
        out = model(x)
    assert out.dtype == torch.bfloat16 and model[1].running_mean.dtype == torch.float32
    rows = tool.results
    assert {r["verdict"] for r in rows} == {"PASS"}, [(r["index"], r["verdict"], r["message"]) for r in rows]
    # the running statistics were written by the call and compared after it, in float32
    after = [r for r in rows if "(after)" in str(r["index"])]
    assert len(after) >= 2 and all(r["dtype"] == "float32" for r in after if "dtype" in r)
