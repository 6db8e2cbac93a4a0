"""``ditorch info --probe`` on torch_openreg, a C++ PrivateUse1 plugin nobody here wrote (found by the generic
adapter).

What the probe must report there: memory statistics ``unsupported`` (openreg's allocator keeps none), synchronize,
streams and events ``derived`` (from ``torch.accelerator``/``torch.Stream``/``torch.Event``: its module has none of
its own), the idioms passing, nothing ``wrong``. openreg's random kernels draw from the CPU's generator
(``../shared/vendors/README.md``), so its own ``manual_seed`` and RNG state functions change no draw: ditorch's
seeding follows the generator the kernels use, and those rows are ``generic``/``derived``, reproducible.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from plugin_run import ditorch

RNG = ("manual_seed", "manual_seed_all", "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
       "seed", "initial_seed")
MEMORY = ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "mem_get_info",
          "memory_stats", "memory_stats_as_nested_dict", "reset_peak_memory_stats", "memory_summary")


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int, dict]:
    path = Path(tmp_path_factory.mktemp("probe")) / "probe.json"
    proc = ditorch("info", "--probe", "--json", str(path), DITORCH_QUIET="1")
    assert path.is_file(), proc.stdout + proc.stderr
    return proc.stdout, proc.returncode, json.loads(path.read_text())


def results(data: dict) -> dict[str, str]:
    return {row["name"]: row["result"] for row in data["rows"]}


def test_probe_finds_openreg_and_nothing_wrong(probed) -> None:
    stdout, status, data = probed
    assert data["device"] == "openreg" and data["adapter"].startswith("generic: PrivateUse1 backend 'openreg'")
    assert [name for name, result in results(data).items() if result == "wrong"] == [], stdout
    assert status == 0 and f"probe: {data['summary']['native']} native," in stdout and "0 wrong" in stdout


def test_seeding_follows_the_generator_the_kernels_draw_from(probed) -> None:
    _, _, data = probed
    rows = {row["name"]: row for row in data["rows"]}
    for name in RNG:
        for qualname in (f"torch.cuda.{name}", f"torch.cuda.random.{name}"):
            if qualname in rows:
                assert (rows[qualname]["kind"], rows[qualname]["result"]) == ("generic", "derived"), qualname
    assert rows["torch.cuda.manual_seed"]["detail"] == "same seed, same draws"
    assert rows["idiom: RNG reproducibility"]["result"] == "derived"


def test_memory_rows_are_unsupported(probed) -> None:
    _, _, data = probed
    got = results(data)
    for name in MEMORY:
        assert got[f"torch.cuda.{name}"] == "unsupported", name
    assert got["idiom: memory statistics"] == "unsupported"
    refusal = next(row["detail"] for row in data["rows"] if row["name"] == "torch.cuda.memory_allocated")
    assert "not a DeviceAllocator" in refusal


def test_synchronization_streams_events_are_derived_and_idioms_pass(probed) -> None:
    stdout, _, data = probed
    got = results(data)
    for name in ("synchronize", "Stream", "Event", "current_stream", "stream", "set_stream"):
        assert got[f"torch.cuda.{name}"] == "derived", name
    assert got["torch.cuda.device_count"] == got["torch.cuda.set_device"] == "native"
    for idiom in ("train step equal to the CPU", "torch.compile", "streams and events", "AMP (autocast + GradScaler)",
                  "pinned DataLoader", "save/load with map_location", "op tools"):
        assert got[f"idiom: {idiom}"] in ("native", "derived"), (idiom, stdout)
    assert got["idiom: streams and events"] == got["idiom: torch.compile"] == "derived"
    assert re.search(r"^torch\.cuda\.synchronize\s+generic\s+derived\s", stdout, re.M)
