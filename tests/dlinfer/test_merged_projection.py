"""q/k/v and gate/up as one multiply (src/dlinfer/framework/transformers/merged.py): the layers' parameters become
views of one tensor, results equal the separate layers', and a moved storage (``.to``, ``.data =``) is merged
again instead of serving stale weights."""

from __future__ import annotations

import torch
from torch import nn

from dlinfer.framework.transformers.merged import merged_projection


class _Owner(nn.Module):
    def __init__(self, bias: bool = True) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 4, bias=bias), nn.Linear(8, 6, bias=bias)


def test_merged_equals_separate_and_shares_storage():
    torch.manual_seed(0)
    owner = _Owner()
    x = torch.randn(3, 8)
    want = torch.cat((owner.a(x), owner.b(x)), -1)
    params = (owner.a.weight, owner.b.weight)
    weight, bias, sizes = merged_projection(owner, ("a", "b"))
    torch.testing.assert_close(torch.nn.functional.linear(x, weight, bias), want)
    assert sizes == (4, 6)
    assert owner.a.weight is params[0] and owner.a.weight.data_ptr() == weight.data_ptr()
    with torch.no_grad():
        owner.b.weight.mul_(2)                       # an in-place update reaches the merged tensor
    weight, bias, _ = merged_projection(owner, ("a", "b"))
    torch.testing.assert_close(torch.nn.functional.linear(x, weight, bias)[:, 4:], owner.b(x))


def test_a_moved_storage_is_merged_again():
    owner = _Owner()
    x = torch.randn(2, 8)
    merged_projection(owner, ("a", "b"))
    owner.a.weight.data = torch.randn(4, 8)          # a new storage: the old merge would be stale
    weight, bias, _ = merged_projection(owner, ("a", "b"))
    torch.testing.assert_close(torch.nn.functional.linear(x, weight, bias)[:, :4], owner.a(x))
    owner.b.bias.data = torch.randn(6)               # a new bias storage alone is seen too
    weight, bias, _ = merged_projection(owner, ("a", "b"))
    torch.testing.assert_close(torch.nn.functional.linear(x, weight, bias)[:, 4:], owner.b(x))
    owner.to(torch.float64)
    weight, _, _ = merged_projection(owner, ("a", "b"))
    assert weight.dtype == torch.float64


def test_layers_that_cannot_share_a_multiply():
    owner = _Owner()
    owner.b = nn.Linear(8, 6, bias=False)             # bias on one layer only
    assert merged_projection(owner, ("a", "b")) is None
