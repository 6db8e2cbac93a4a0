"""``ditorch info --probe`` on dipu: a row per torch.cuda name and per idiom, and a wrong answer is caught.

The probe runs in a subprocess (``import ditorch`` maps torch.cuda process-wide). To show that a vendor function
answering wrongly is flagged ``wrong`` and not ``native``, one is replaced before ``import ditorch`` maps it.
"""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from vendor_env import clean_env

from ditorch.mocking import cuda_surface
from ditorch.probe_idioms import IDIOMS

SUMMARY = re.compile(r"^probe: (\d+) native, (\d+) derived, (\d+) unsupported, (\d+) wrong$", re.M)


def surface_names() -> list[str]:
    return [cuda_surface.Entry(sub, name, "").qualname for sub, _, name in cuda_surface.surface()]


def probe(tmp_path: Path, patch: str = "", **env: str) -> tuple[subprocess.CompletedProcess[str], dict | None]:
    """``ditorch info --probe --json`` after ``patch`` (code run after ``import torch, torch_dipu``, before ditorch
    maps torch.cuda); the JSON copy, or None where none was written."""
    path = tmp_path / "probe.json"
    code = textwrap.dedent(f"""
        import sys, torch, torch_dipu
        {patch}
        sys.argv = ["ditorch", "info", "--probe", "--json", {str(path)!r}]
        from ditorch.cli import main
        sys.exit(main())
    """)
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(DITORCH_QUIET="1", **env), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    return proc, json.loads(path.read_text()) if path.is_file() else None


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], dict, Path]:
    folder = tmp_path_factory.mktemp("probe")
    proc, data = probe(folder)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, data, folder


def by_name(data: dict) -> dict[str, dict]:
    return {row["name"]: row for row in data["rows"]}


def test_every_surface_name_and_idiom_is_a_row(clean_run) -> None:
    proc, data, folder = clean_run
    names, idioms = surface_names(), [f"idiom: {i.name}" for i in IDIOMS]
    assert [row["name"] for row in data["rows"]] == names + idioms
    table = {line.split()[0] for line in proc.stdout.splitlines() if line.startswith("torch.cuda.")}
    assert table == set(names)
    for name in idioms:
        assert re.search(rf"^{re.escape(name)}\s+idiom\s+(native|derived)\s", proc.stdout, re.M), name
    assert [p.name for p in folder.iterdir()] == ["probe.json"]  # written atomically: no temporary file left


def test_results_and_summary(clean_run) -> None:
    proc, data, _ = clean_run
    rows = by_name(data)
    assert {row["result"] for row in data["rows"]} <= {"native", "derived", "unsupported"}
    assert all(row["result"] in ("native", "derived") for row in data["rows"] if row["kind"] == "idiom")
    assert rows["torch.cuda.memory_allocated"]["result"] == "native"  # torch.dipu's own, and it passed its check
    assert rows["torch.cuda.memory_stats"]["result"] == "derived"  # ditorch's CUDA-shaped dict
    assert rows["torch.cuda.CUDAGraph"]["result"] == "unsupported"
    assert (rows["torch.cuda.FloatTensor"]["kind"], rows["torch.cuda.FloatTensor"]["result"]) == ("kept", "derived")
    assert all(row["result"] == "unsupported" for row in data["rows"] if row["kind"] == "unsupported")
    counts = collections.Counter(row["result"] for row in data["rows"])
    assert data["summary"] == {r: counts.get(r, 0) for r in ("native", "derived", "unsupported", "wrong")}
    assert [int(n) for n in SUMMARY.search(proc.stdout).groups()] == list(data["summary"].values())
    assert data["device"] == "dipu" and data["adapter"] == "adapter dipu" and data["framework"].startswith("torch_dipu")
    assert data["torch"] and all(isinstance(row["seconds"], float) for row in data["rows"])
    assert f"json: {clean_run[2] / 'probe.json'}" in proc.stdout


def test_a_vendor_function_answering_wrongly_is_wrong_not_native(tmp_path: Path) -> None:
    proc, data = probe(tmp_path, "torch.dipu.memory_allocated = lambda device=None: 0")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = by_name(data)
    for name in ("torch.cuda.memory_allocated", "torch.cuda.memory.memory_allocated"):
        assert rows[name]["kind"] == "vendor" and rows[name]["result"] == "wrong"
        assert "grew by 0 B" in rows[name]["detail"]
    assert rows["idiom: memory statistics"]["result"] == "wrong"
    assert rows["torch.cuda.device_count"]["result"] == "native"  # the other rows are checked as before
    assert "wrong: torch.cuda.memory_allocated: grew by 0 B" in proc.stdout
    assert int(SUMMARY.search(proc.stdout).group(4)) == data["summary"]["wrong"] > 0


def test_a_constant_rng_state_is_wrong(tmp_path: Path) -> None:
    patch = "state = torch.dipu.get_rng_state(); torch.dipu.get_rng_state = lambda device='dipu': state.clone()"
    proc, data = probe(tmp_path, patch)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = by_name(data)
    for name in ("torch.cuda.get_rng_state", "torch.cuda.random.get_rng_state"):
        assert rows[name]["kind"] == "vendor" and rows[name]["result"] == "wrong", rows[name]
    assert rows["idiom: RNG reproducibility"]["result"] == "wrong"


def test_without_a_device_there_is_nothing_to_probe(tmp_path: Path) -> None:
    proc, data = probe(tmp_path, DITORCH_VENDOR="cpu")
    assert proc.returncode == 2 and data is None
    last = proc.stderr.strip().splitlines()[-1]
    assert last == "ditorch info: error: --probe: no accelerator to probe (ditorch runs on the CPU)"
    proc = subprocess.run([sys.executable, "-m", "ditorch", "info", "--json", "x.json"], env=clean_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--probe" in proc.stderr and not (tmp_path / "x.json").exists()
