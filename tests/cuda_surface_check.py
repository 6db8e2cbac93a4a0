"""Call every public ``torch.cuda`` name under ``import ditorch`` in a subprocess and report what each did.

Shared by tests/ditorch/test_cuda_surface.py (dipu) and tests/vendors (a real C++ plugin): the mapping is
process-wide, so one fresh interpreter imports ditorch, calls each name of ``cuda_surface.entries`` with sample
arguments, and prints JSON: ``problems`` (an unsupported name that answered or refused without naming itself, a refusal
that does not name the vendor, any other exception), ``kinds`` (qualname -> kind) and ``refused`` (every name
that raised NotSupportedOnDevice: the unsupported ones, and mapped ones the plugin could not serve).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

#: Arguments for names that cannot be called without any (built inside the subprocess).
SAMPLE_ARGS = """
x = torch.ones(4, device="cuda")
SAMPLES = {
    "set_device": (0,), "manual_seed": (1,), "manual_seed_all": (1,), "set_stream": (torch.cuda.current_stream(),),
    "set_rng_state": (torch.cuda.get_rng_state(),), "set_rng_state_all": (torch.cuda.get_rng_state_all(),),
    "stream": (None,), "device": (0,), "device_of": (x,), "StreamContext": (None,), "range_push": ("r",),
    "range_start": ("r",), "mark": ("m",), "range": ("r",), "can_device_access_peer": (0, 0),
    "set_sync_debug_mode": (0,), "range_end": (0,), "custom_bwd": (lambda ctx, grad: grad,),
    "caching_allocator_alloc": (512,), "caching_allocator_delete": (0,),
}
"""

SCRIPT = SAMPLE_ARGS + """
import contextlib, inspect, json, types
from ditorch.mocking import cuda_surface
VENDOR = ditorch.adapter.name
problems, kinds, refused = [], {}, []
for entry in cuda_surface.entries(ditorch.adapter.device_module()):
    module = torch.cuda if not entry.module else getattr(torch.cuda, entry.module)
    obj = getattr(module, entry.name)
    kinds[entry.qualname] = entry.kind
    if not callable(obj) or entry.kind == "kept" and (
            entry.name.endswith(("Tensor", "Storage", "Error")) or entry.name == "cudaStatus"):
        continue  # types and constants: nothing to call
    args = SAMPLES.get(entry.name, ())
    try:
        result = obj(*args)
        if isinstance(result, contextlib.AbstractContextManager) or hasattr(result, "__enter__"):
            with result:
                pass
        if entry.kind == "unsupported":
            problems.append(f"{entry.qualname}: unsupported, but the call returned {result!r}")
    except cuda_surface.NotSupportedOnDevice as exc:
        # An unsupported name refuses naming itself; a mapped one may find at call time that the plugin cannot
        # answer (no memory statistics): it refuses naming the function it needed and the vendor's reason.
        if f"is not supported on {VENDOR}" not in str(exc) and f"is not known on {VENDOR}" not in str(exc):
            problems.append(f"{entry.qualname}: the refusal does not name the vendor: {exc}")
        elif entry.kind == "unsupported" and f".{entry.name} is not supported" not in str(exc):
            problems.append(f"{entry.qualname}: the refusal does not name it: {exc}")
        else:
            refused.append(entry.qualname)
    except Exception as exc:
        problems.append(f"{entry.qualname} ({entry.kind}) raised {type(exc).__name__}: {exc}")
print(json.dumps({"problems": problems, "kinds": kinds, "refused": refused}))
"""




def surface_report(env: dict[str, str]) -> dict:
    """Run :data:`SCRIPT` after ``import torch, ditorch`` with ``env``; the parsed JSON."""
    code = "import torch, ditorch\n" + textwrap.dedent(SCRIPT)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])
