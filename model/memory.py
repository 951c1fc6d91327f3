"""The process's C allocator, tuned once at engine import so a trace's memory is reused.

A trace keeps every intermediate: at T = 128 about 39 MB for MiniLM-L6 and 290 MB for
SmolLM2-135M, where a plain forward keeps a few MB and frees the rest as it goes. With glibc's
defaults, freeing a trace hands most of those pages back to the kernel (the top of the heap is
trimmed above 2x the dynamic mmap threshold, and blocks above that threshold are munmap-ed), so
the next trace page-faults every page in again and the kernel zeroes each one: ~9,000 faults per
MiniLM trace and ~56,000 per SmolLM2 trace at T = 128 (torch.profiler shows it as slow `addmm`s
and system time), against a few hundred for transformers' forward.

`keep_freed_memory()` sets two glibc knobs (mallopt) for the whole process:
  M_MMAP_THRESHOLD 32 MB  blocks up to 32 MB (glibc's maximum) come from the heap, where freed
                          blocks are reused, instead of their own mmap (returned on free);
  M_TRIM_THRESHOLD 512 MB up to 512 MB of free memory at the top of the heap is kept for reuse
                          instead of being returned to the kernel after every free.
The same as running the process with MALLOC_MMAP_THRESHOLD_=33554432 and
MALLOC_TRIM_THRESHOLD_=536870912. It changes no value, only where freed memory goes: the cost is
that memory freed by one trace stays in the process's RSS (up to ~the largest trace) until the
next one reuses it. It applies to everything in the process (the benchmarks' transformers
baseline included, which runs in the same process). Other C libraries (musl, macOS): nothing
happens. ATTENTION_LAB_MALLOC=default in the environment leaves glibc's defaults alone.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc refuses more than HEAP_MAX_SIZE / 2 = 32 MB on 64-bit
TRIM_THRESHOLD = 512 << 20

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Tune glibc malloc as above (once per process); True when it took effect."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get("ATTENTION_LAB_MALLOC", "").lower() == "default" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _applied
