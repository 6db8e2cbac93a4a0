"""DIOPI: the device-independent operator interface.

The lowest layer of ditorch, free of import side effects. It defines what an operator is
(:mod:`diopi.registry`), which ATen overloads map to which DIOPI function
(:mod:`diopi.function_table`), and how two results are judged (:mod:`diopi.compare`).
"""

from diopi import function_table  # noqa: F401  (fills the registry)
from diopi.registry import (
    DiopiFunction,
    UnknownFunctionError,
    aten_packet_name,
    function_for_aten,
    functions,
    get_function,
    operator_packet,
    register_function,
)

__all__ = [
    "DiopiFunction",
    "UnknownFunctionError",
    "aten_packet_name",
    "operator_packet",
    "function_for_aten",
    "functions",
    "get_function",
    "register_function",
]
