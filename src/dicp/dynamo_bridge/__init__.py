"""The vendor-independent half of dicp: conversion registry, backend factory on AOTAutograd, partitioning into
vendor islands and eager islands, graph passes, compile cache, precision check."""

from .compile_fx import DicpCompileError, compile_graph, make_backend
from .conversion import Conversion, ConversionRegistry
from .passes import fold_transposes, run_passes
from .report import compile_report, reset_report
from .vendor import GraphPass, Vendor

__all__ = [
    "Conversion", "ConversionRegistry", "DicpCompileError", "GraphPass", "Vendor", "compile_graph",
    "compile_report", "fold_transposes", "make_backend", "reset_report", "run_passes",
]
