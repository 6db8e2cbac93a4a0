"""The user's line that made a call: ``file:line function: source``, skipping torch's and the tools' frames.

A module that wraps torch functions for the user (ditorch's cuda mapping, a vendor plugin's patches) marks
itself with a module-level ``__call_site_transparent__ = True``: its frames are skipped too, so the call site
stays the user's line (``x.cuda()``, not the wrapper that forwards it).
"""

from __future__ import annotations

import linecache
import os
from types import FrameType

import torch

__all__ = ["call_site"]

_SKIP_DIRS: list[str] = [
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
    os.path.dirname(os.__file__) + os.sep + "contextlib.py",
]
_skip_cache: dict[str, bool] = {}
_text_cache: dict[tuple[object, int], str] = {}


def _skipped(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename
    try:
        return _skip_cache[filename]
    except KeyError:
        value = (filename.startswith("<frozen") or any(filename.startswith(d) for d in _SKIP_DIRS)
                 or frame.f_globals.get("__call_site_transparent__") is True)
        _skip_cache[filename] = value
        return value


def _describe(frame: FrameType) -> str:
    code, line = frame.f_code, frame.f_lineno
    key = (code, line)
    text = _text_cache.get(key)
    if text is None:
        source = linecache.getline(code.co_filename, line).strip()
        text = f"{code.co_filename}:{line} {code.co_name}: {source}" if source else \
            f"{code.co_filename}:{line} {code.co_name}"
        _text_cache[key] = text
    return text


def call_site(frame: FrameType | None) -> str:
    """The innermost frame from ``frame`` outwards that is outside torch, op_tools and call-site-transparent
    modules, described as ``file:line function: source``."""
    while frame is not None and _skipped(frame):
        frame = frame.f_back
    return _describe(frame) if frame is not None else "<unknown>"
