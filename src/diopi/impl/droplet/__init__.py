"""droplet, the reference vendor, as a DIOPI implementation (entry point ``diopi.impls: droplet``).

``diopi.impls.load("droplet")`` gives droplet's kernels without torch_dipu: the reference kernels with the
traits and faults of the ``DROPLET_*`` switches, overridden by keywords::

    import diopi.impls
    impl = diopi.impls.load("droplet", faults="diopiSiluBackward:bias", matmul_precision="medium")

torch_dipu's droplet runtime asks this implementation for every kernel, so dipu and ``--impl droplet`` run the
same kernels. See docs/droplet.md and docs/diopi_vendors.md.
"""

from __future__ import annotations

from typing import Any

from diopi.impl.droplet.faults import DEFAULT_PARAMS, Fault, parse_faults
from diopi.impl.droplet.impl import DropletImpl
from diopi.impl.droplet.traits import MATMUL_PRECISIONS, DropletTraits, faults_from_env, parse_dtype, parse_size

__all__ = ["DEFAULT_PARAMS", "MATMUL_PRECISIONS", "DropletImpl", "DropletTraits", "Fault", "faults_from_env", "impl",
           "parse_dtype", "parse_faults", "parse_size"]


def impl(**switches: Any) -> DropletImpl:
    """Entry point ``diopi.impls: droplet``: droplet configured from the environment, ``switches`` overriding
    it (``faults="silu_backward:bias"``, ``unsupported_dtypes="float64"``, ``matmul_precision="medium"``)."""
    return DropletImpl.from_env().replace(**switches)
