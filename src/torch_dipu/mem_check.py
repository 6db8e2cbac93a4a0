"""``DIPU_MEM_CHECK=1``: record every device allocation and free; report blocks still alive at exit.

The checker observes the caching allocator's blocks (one per storage, and ``caching_allocator_alloc``'s) and the
vendor's ``raw_malloc`` / ``raw_free``. Each block is recorded with its size, device and allocating line (the
innermost Python frame outside torch, torch_dipu, diopi and op_tools), and with
``DIPU_MEM_CHECK_ENABLE_BACKTRACE=1`` its whole Python stack. At exit it prints
``dipu memory checker: N blocks (X) not released`` and one entry per block to stderr (nothing on a clean
run). A free of an unknown address or a double free reaching the allocator or the vendor raises RuntimeError
naming the address and, when known, where it was allocated and first freed. ``DIPU_MEM_CHECK_MAX_BLOCK``: warn
once when more blocks are alive (a likely leak), naming the top allocating lines; ``DIPU_MEM_CHECK_LOG_INTERVAL``:
one line with the live blocks and bytes every that many allocations. The checker never changes results.
"""

from __future__ import annotations

import atexit
import collections
import gc
import importlib.util
import linecache
import os
import sys
from dataclasses import dataclass
from typing import Any

from torch_dipu.memory import format_bytes
from torch_dipu.state import DipuState, get_state

_PREFIX = "dipu memory checker"
#: Freed blocks remembered for double-free messages.
_FREED_MEMORY = 10000
#: Entries printed at exit (``report()`` lists every block).
_EXIT_ENTRIES = 100

Frame = tuple[str, int, str]  # file, line, function


def _library_dirs() -> tuple[str, ...]:
    dirs = []
    for name in ("torch", "torch_dipu", "diopi", "op_tools"):
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            dirs.append(os.path.join(os.path.realpath(location), ""))
            dirs.append(os.path.join(location, ""))
    return tuple(dirs)


_LIBRARY_DIRS: tuple[str, ...] = ()


def _user_frames(depth: int, whole: bool) -> list[Frame]:
    """The caller's frames outside the library packages, innermost first (``whole``: all, else the first)."""
    frames: list[Frame] = []
    try:
        frame = sys._getframe(depth)
    except ValueError:  # a shallower stack (a block freed by the garbage collector at exit): no user frame
        return frames
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_LIBRARY_DIRS):
            frames.append((filename, frame.f_lineno, frame.f_code.co_name))
            if not whole:
                break
        frame = frame.f_back
    return frames


def _format_frame(frame: Frame, indent: str) -> str:
    filename, line, function = frame
    text = f"{indent}{filename}:{line} in {function}"
    source = linecache.getline(filename, line).strip()
    return f"{text}\n{indent}  {source}" if source else text


@dataclass
class LiveBlock:
    """A block the checker saw allocated and not yet freed."""

    address: int
    size: int
    device: int
    #: Allocating frames outside torch / torch_dipu / diopi / op_tools, innermost first (all of them with
    #: ``DIPU_MEM_CHECK_ENABLE_BACKTRACE=1``, else the allocating line only).
    stack: list[Frame]

    def where(self) -> str:
        return "unknown" if not self.stack else "{}:{}".format(*self.stack[0][:2])


class MemChecker:
    """The observer the allocator calls (``on_alloc`` / ``on_free``) plus checked vendor raw_malloc / raw_free."""

    def __init__(self, backtrace: bool = False, max_block: int = 10000, log_interval: int = 1000) -> None:
        global _LIBRARY_DIRS
        _LIBRARY_DIRS = _LIBRARY_DIRS or _library_dirs()
        self.backtrace, self.max_block, self.log_interval = backtrace, max_block, log_interval
        self.blocks: dict[tuple[int, int], LiveBlock] = {}  # (device, address) -> block
        self.freed: collections.OrderedDict[int, tuple[str, str]] = collections.OrderedDict()
        self.raw: dict[tuple[int, int], tuple[int, str]] = {}  # (vendor device, start) -> (end, where)
        self.allocations = 0
        self.warned = False

    # -- allocator blocks --------------------------------------------------------------------------------
    def on_alloc(self, block: Any) -> None:
        stack = _user_frames(2, self.backtrace)
        self.blocks[(block.device, block.address)] = LiveBlock(block.address, block.size, block.device, stack)
        self.freed.pop(block.address, None)
        self.allocations += 1
        if self.allocations % self.log_interval == 0:
            print(f"{_PREFIX}: {self.allocations} allocations, {len(self.blocks)} blocks "
                  f"({format_bytes(self.live_bytes())}) alive", file=sys.stderr)
        if len(self.blocks) > self.max_block and not self.warned:
            self.warned = True
            print(self.max_block_warning(), file=sys.stderr)

    def on_free(self, block: Any) -> None:
        live = self.blocks.pop((block.device, block.address), None)
        if live is not None:
            self.freed[block.address] = (live.where(), self._here(3))
            if len(self.freed) > _FREED_MEMORY:
                self.freed.popitem(last=False)

    @staticmethod
    def _here(depth: int) -> str:
        frames = _user_frames(depth, False)
        return "{}:{}".format(*frames[0][:2]) if frames else "unknown"

    def live_bytes(self) -> int:
        return sum(b.size for b in self.blocks.values())

    def describe(self, address: int) -> str:
        """``(allocated at ..., first freed at ...)`` when the address was seen, else an empty string."""
        seen = self.freed.get(address)
        return "" if seen is None else f" (allocated at {seen[0]}, first freed at {seen[1]})"

    def max_block_warning(self) -> str:
        sites = collections.Counter(b.where() for b in self.blocks.values())
        top = ", ".join(f"{site} ({n} blocks)" for site, n in sites.most_common(5))
        return (f"{_PREFIX}: {len(self.blocks)} blocks alive, more than DIPU_MEM_CHECK_MAX_BLOCK={self.max_block}: "
                f"a likely leak; top allocating lines: {top}")

    # -- vendor raw memory ---------------------------------------------------------------------------------
    def checked_raw(self, runtime: Any) -> None:
        """Route ``runtime.raw_malloc`` / ``raw_free`` through the checker (instance attributes)."""
        raw_malloc, raw_free = runtime.raw_malloc, runtime.raw_free

        def checked_malloc(index: int, nbytes: int) -> int:
            address = raw_malloc(index, nbytes)
            self.raw[(index, address)] = (address + nbytes, self._here(2))
            self.freed.pop(address, None)
            return address

        def checked_free(index: int, address: int, nbytes: int) -> None:
            self.raw_free_check(index, address, nbytes)
            raw_free(index, address, nbytes)

        runtime.raw_malloc, runtime.raw_free = checked_malloc, checked_free

    def raw_free_check(self, index: int, address: int, nbytes: int) -> None:
        for (device, start), (end, where) in self.raw.items():  # noqa: B007  (used after the loop)
            if device == index and start <= address and address + nbytes <= end:
                break
        else:
            raise RuntimeError(f"{_PREFIX}: raw_free of address 0x{address:x} ({nbytes} bytes) on vendor device "
                               f"{index}: not an allocated range (unknown address or double free)"
                               f"{self.describe(address)}")
        del self.raw[(index, start)]
        if start < address:
            self.raw[(index, start)] = (address, where)
        if address + nbytes < end:
            self.raw[(index, address + nbytes)] = (end, where)
        self.freed[address] = (where, self._here(3))

    # -- reports -------------------------------------------------------------------------------------------
    def report(self, limit: int | None = None) -> str:
        """The leak report: empty when no block is alive."""
        if not self.blocks:
            return ""
        blocks = sorted(self.blocks.values(), key=lambda b: (b.device, b.address))
        lines = [f"{_PREFIX}: {len(blocks)} blocks ({format_bytes(sum(b.size for b in blocks))}) not released"]
        for block in blocks[:limit]:
            head = f"  block 0x{block.address:x} ({format_bytes(block.size)}) on dipu:{block.device}, allocated at"
            if not block.stack:
                lines.append(f"{head} an unknown place")
                continue
            lines.append(head + ":")
            lines.extend(_format_frame(frame, "    ") for frame in block.stack)
        if limit is not None and len(blocks) > limit:
            lines.append(f"  ... and {len(blocks) - limit} more blocks (torch_dipu.mem_check.report() lists all)")
        if not self.backtrace:
            lines.append("  (the allocating lines only: set DIPU_MEM_CHECK_ENABLE_BACKTRACE=1 for whole Python stacks)")
        return "\n".join(lines)

    def at_exit(self) -> None:
        """Print the leak report (nothing on a clean run), after the autograd worker and the garbage collector
        have released what the program no longer holds."""
        try:
            from torch_dipu import shutdown

            shutdown.drain_autograd_worker()
            gc.collect()
            text = self.report(_EXIT_ENTRIES)
            if text:
                print(text, file=sys.stderr, flush=True)
        except Exception as exc:  # noqa: BLE001  (a debugging tool never breaks the program's exit)
            print(f"{_PREFIX}: report failed: {exc!r}", file=sys.stderr)


_CHECKER: MemChecker | None = None


def enable(backtrace: bool = False, max_block: int = 10000, log_interval: int = 1000,
           state: DipuState | None = None) -> MemChecker:
    """Start checking (``DIPU_MEM_CHECK=1`` with ``DIPU_MEM_CHECK_ENABLE_BACKTRACE``, ``DIPU_MEM_CHECK_MAX_BLOCK``,
    ``DIPU_MEM_CHECK_LOG_INTERVAL`` as keywords): blocks allocated from now on are recorded and reported at exit."""
    global _CHECKER
    state = state or get_state()
    disable(state)
    checker = MemChecker(backtrace, max_block, log_interval)
    state.memory.settle()
    for device in state.memory.devices:  # segments taken before the checker started may be freed later
        for segment in device.segments.values():
            checker.raw[(device.physical, segment.address)] = (segment.address + segment.size, "before the checker")
    checker.checked_raw(state.runtime)
    state.memory.observer = checker
    atexit.register(checker.at_exit)
    _CHECKER = checker
    return checker


def disable(state: DipuState | None = None) -> None:
    """Stop checking: no exit report, vendor calls unchecked."""
    global _CHECKER
    if _CHECKER is None:
        return
    state = state or get_state()
    state.memory.observer = None
    for name in ("raw_malloc", "raw_free"):
        state.runtime.__dict__.pop(name, None)
    atexit.unregister(_CHECKER.at_exit)
    _CHECKER = None


def install(state: DipuState) -> None:
    """Start the checker when ``state.config.mem_check`` is set (at import)."""
    config = state.config
    if config.mem_check:
        enable(config.mem_check_backtrace, config.mem_check_max_block, config.mem_check_log_interval, state)


def checker() -> MemChecker | None:
    """The running checker, or None."""
    return _CHECKER


def live_blocks() -> list[LiveBlock]:
    """Blocks alive now: the checker's records (with allocating lines) when it runs, else the allocator's."""
    if _CHECKER is not None:
        return sorted(_CHECKER.blocks.values(), key=lambda b: (b.device, b.address))
    return [LiveBlock(b.address, b.size, b.device, []) for b in get_state().memory.live_blocks()]


def report() -> str:
    """The leak report the checker prints at exit, for the blocks alive now (empty string: none)."""
    if _CHECKER is not None:
        return _CHECKER.report()
    probe = MemChecker()
    probe.blocks = {(b.device, b.address): b for b in live_blocks()}
    return probe.report()
