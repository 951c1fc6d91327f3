"""The app's one convention for sizes in bytes (issue 33): binary units, powers of 1024, named as
such (KiB, MiB, GiB), everywhere a page shows memory (the KV cache, attention weights, peak
memory). The same number used to read 94.4 MB on one page (10^6 bytes) and 90.0 MiB on another.

    human_bytes(94_371_840)   -> "90.0 MiB"
    unit = byte_unit(max_bytes)  # an axis for a chart: values / unit.size, titled unit.name

Pure standard library (below every other package, like labels/__init__.py)."""
from __future__ import annotations

from dataclasses import dataclass

UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
KIB, MIB, GIB = 2**10, 2**20, 2**30


@dataclass(frozen=True)
class ByteUnit:
    name: str  # "B", "KiB", "MiB", "GiB" or "TiB"
    size: int  # bytes in one of it: 1, 1024, 1024², ...

    def of(self, n_bytes: float) -> float:
        """n_bytes in this unit (90.0 for 94,371,840 bytes in MiB)."""
        return n_bytes / self.size


def byte_unit(n_bytes: float) -> ByteUnit:
    """The largest binary unit in which n_bytes is at least 1 (B below 1 KiB; TiB at most):
    the unit human_bytes writes n_bytes in, and the one a chart's axis uses for values up to it."""
    n, i = abs(float(n_bytes)), 0
    while i < len(UNITS) - 1 and n >= 1024:
        n /= 1024
        i += 1
    return ByteUnit(UNITS[i], 1024**i)


def human_bytes(n_bytes: float, digits: int = 1) -> str:
    """A size for reading: 1,536 -> "1.5 KiB", 94,371,840 -> "90.0 MiB", 512 -> "512 B"
    (binary units; whole bytes below 1 KiB; thousands separated)."""
    u = byte_unit(n_bytes)
    if u.size == 1:
        return f"{float(n_bytes):,.0f} B"
    return f"{u.of(n_bytes):,.{digits}f} {u.name}"
