"""A process whose last statement is a dipu backward pass exits cleanly (no abort at interpreter exit)."""

LAST_STATEMENT_IS_BACKWARD = """
import torch, torch_dipu
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).dipu()
model(torch.randn(4, 8, device="dipu")).sum().backward()
"""


def test_exit_right_after_backward_is_clean(run_python) -> None:  # noqa: ANN001
    # Without the exit-time drain this aborted about half of the time ("terminate called ...", code 134).
    for _ in range(4):
        result = run_python(LAST_STATEMENT_IS_BACKWARD, check=False)
        assert result.returncode == 0, result.stderr
        assert "terminate called" not in result.stderr
