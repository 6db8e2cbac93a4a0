"""A small suite defined here (so the tests do not depend on the family configs being written alongside), its
reference data generated once per session, and a helper running the conformance CLI on it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from diopi.conformance import cli
from diopi.conformance.spec import Config, Input, Stats, Values
from diopi.conformance.suite import load_suite

F32_F16 = (torch.float32, torch.float16)

CONFIGS = [
    Config("diopiMul", op="mul.Tensor", inputs={"self": Input(), "other": Input()},
           shapes=[((2, 3), (2, 3)), ((), ()), ((4, 1), (4, 5))], dtypes=(*F32_F16, torch.int64),
           inplace="mul_.Tensor"),
    Config("diopiAdd", op="add.Tensor", inputs={"self": Input(), "other": Input()},
           shapes=[((3, 4), (4,)), ((0, 3), (3,))], params={"alpha": [1, 2]}, dtypes=F32_F16,
           values=Values("special")),
    Config("diopiSilu", op="silu.default", inputs={"self": Input()}, shapes=[((4, 5),), ((),)], dtypes=F32_F16),
    Config("diopiSiluBackward", from_forward="diopiSilu", dtypes=(torch.float32,)),
    Config("diopiLayerNorm", call="torch.nn.functional.layer_norm",
           inputs={"input": Input(), "weight": Input(), "bias": Input()}, shapes=[((2, 4), (4,), (4,))],
           params={"normalized_shape": [(4,)]}, dtypes=(torch.float32,), layouts=("contiguous", "noncontiguous")),
    Config("diopiCat", op="cat.default", inputs={"tensors": Input(list_of=3)},
           shapes=[([(2, 3), (1, 3), (0, 3)],), ((2, 2),)], params={"dim": [0]}, dtypes=(torch.float32,)),
    Config("diopiNormal", op="normal_.default", inputs={"self": Input()}, shapes=[((40, 50),)],
           params={"mean": [2.0], "std": [0.5]}, dtypes=(torch.float32,), layouts=("contiguous",),
           stats=Stats("moments", mean="param:mean", std="param:std")),
    Config("diopiBernoulli", op="bernoulli.default", inputs={"self": Input(values=Values("probability"))},
           shapes=[((40, 50),)], dtypes=(torch.float32, torch.float64), layouts=("contiguous",),
           stats=Stats("bernoulli")),
]


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """Reference data of :data:`CONFIGS`, generated once."""
    data = tmp_path_factory.mktemp("conformance") / "data"
    suite = load_suite(families=(), extra=CONFIGS)
    from diopi.conformance.gen import gen_function

    for function in suite.functions():
        cases, recipes = suite.expand(function)
        result = gen_function(data, function, cases, recipes)
        assert not result.errors, result.errors
    return data


@pytest.fixture
def run_cli(monkeypatch, capsys):
    """``run_cli(*argv) -> (status, stdout, stderr)`` on the suite of :data:`CONFIGS`."""
    monkeypatch.setattr(cli, "load_suite", lambda extra=(): load_suite(families=(), extra=CONFIGS))

    def run(*argv: str) -> tuple[int, str, str]:
        status = cli.main(list(argv))
        out = capsys.readouterr()
        return status, out.out, out.err

    return run
