"""Vendor adapters: :class:`Adapter` (the interface) and the built-in ones (:mod:`ditorch.adapters.builtin`)."""

from ditorch.adapters.base import Adapter

__all__ = ["Adapter"]
