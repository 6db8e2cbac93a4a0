"""The vendor-independent half of dicp: conversion registry, backend factory on AOTAutograd, partitioning into
vendor islands and eager islands, graph passes, compile cache, precision check."""

from .conversion import Conversion, ConversionRegistry
from .vendor import GraphPass, Vendor

__all__ = ["Conversion", "ConversionRegistry", "GraphPass", "Vendor"]
