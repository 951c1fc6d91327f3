"""One GGUF file shipped as several chunk files (Gemma 3 270M's 253 MB Q4_K_M file, in four PyPI
packages of ~64 MB each), read as one file without writing a joined copy anywhere.

    chunks = ChunkedFile.open([part00, part01, part02, part03], expected_sha256, what="gemma-3-270m")
    meta, infos, start = read_header(chunks)            # model.gguf_loader: the header, from chunk 0
    w = dequantize_fast(chunks, info, start)            # tensors: numpy views of the mapped chunks

Each chunk is memory-mapped (read-only; the kernel's page cache holds the bytes, as for one
mapped file). The view offers what the GGUF reader uses of a buffer: len(), slices as bytes, and
`view(start, nbytes)`, a read-only uint8 numpy array of a byte range: a view of one chunk's map
when the range lies inside it (every tensor but the few that straddle a boundary), else a copy of
just that range. The header parser reads the first chunk's map (`head()`).

Refusals are ChunkError (a ValueError) with a sentence that says what to do: a chunk missing
(naming it), an empty chunk, or a SHA-256 of the joined bytes that is not the stated one (computed
over the maps in order, ~1 s for 253 MB, nothing copied)."""
from __future__ import annotations

import bisect
import hashlib
import mmap
from pathlib import Path
from typing import Sequence

import numpy as np


class ChunkError(ValueError):
    """A chunked file that cannot be read as the file it claims to be (the message says why and what to do)."""


class ChunkedFile:
    """Several files read as one, each memory-mapped (module docstring)."""

    def __init__(self, maps: list[mmap.mmap], paths: list[Path], what: str):
        self._maps = maps
        self.paths = paths
        self.what = what
        sizes = [len(m) for m in maps]
        self._starts = [0]
        for s in sizes:
            self._starts.append(self._starts[-1] + s)  # chunk i covers [starts[i], starts[i + 1])
        self._size = self._starts[-1]

    @classmethod
    def open(cls, paths: Sequence[str | Path], expected_sha256: str | None = None, *, what: str = "the chunked file",
             hint: str = "") -> ChunkedFile:
        """Map every chunk (in order); with expected_sha256, check the joined bytes' SHA-256.
        ChunkError naming a missing or empty chunk or a hash that differs; `hint` (the install
        command) ends each message."""
        paths = [Path(p) for p in paths]
        tail = f" {hint}" if hint else ""
        if not paths:
            raise ChunkError(f"{what}: no chunk files were given.{tail}")
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise ChunkError(f"{what}: chunk file{'s' if len(missing) > 1 else ''} missing: {', '.join(missing)}. "
                             f"All {len(paths)} chunks are needed.{tail}")
        maps = []
        try:
            for p in paths:
                with open(p, "rb") as f:
                    try:
                        maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
                    except ValueError:  # an empty file cannot be mapped
                        raise ChunkError(f"{what}: chunk file {p} is empty.{tail}") from None
        except BaseException:
            for m in maps:
                m.close()
            raise
        out = cls(maps, paths, what)
        if expected_sha256 is not None:
            try:
                out.verify(expected_sha256, hint)
            except ChunkError:
                out.close()
                raise
        return out

    def verify(self, expected_sha256: str, hint: str = "") -> None:
        """ChunkError unless the joined bytes' SHA-256 is expected_sha256 (hashlib releases the GIL
        while it hashes: another thread may work meanwhile)."""
        digest = self.sha256()
        if digest != expected_sha256.lower():
            tail = f" {hint}" if hint else ""
            raise ChunkError(f"{self.what}: the joined chunks are damaged or not the expected file: their SHA-256 is "
                             f"{digest}, expected {expected_sha256.lower()}.{tail}")

    def __len__(self) -> int:
        return self._size

    def sha256(self) -> str:
        """SHA-256 of the joined bytes (read through the maps, nothing copied)."""
        h = hashlib.sha256()
        for m in self._maps:
            h.update(m)
        return h.hexdigest()

    def head(self) -> mmap.mmap:
        """The first chunk's map: what the GGUF header parser reads (the header lies inside it)."""
        return self._maps[0]

    def view(self, start: int, nbytes: int) -> np.ndarray:
        """Bytes [start, start + nbytes) as a read-only (nbytes,) uint8 array: a view of one
        chunk's map when the range lies inside it, else a copy of the range. ValueError past the end."""
        if start < 0 or nbytes < 0 or start + nbytes > self._size:
            raise ValueError(f"{self.what}: bytes {start}..{start + nbytes} run past the end ({self._size} bytes)")
        i = bisect.bisect_right(self._starts, start) - 1
        off = start - self._starts[i]
        if off + nbytes <= len(self._maps[i]):
            return np.frombuffer(self._maps[i], dtype=np.uint8, count=nbytes, offset=off)
        out = np.empty(nbytes, dtype=np.uint8)  # a range across a chunk boundary: joined once
        done = 0
        while done < nbytes:
            m = self._maps[i]
            take = min(nbytes - done, len(m) - off)
            out[done:done + take] = np.frombuffer(m, dtype=np.uint8, count=take, offset=off)
            done += take
            i, off = i + 1, 0
        out.flags.writeable = False
        return out

    def __getitem__(self, key: slice) -> bytes:
        """Bytes of a slice (step 1), as a file's bytes would be."""
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("a ChunkedFile is read by slices of bytes, data[a:b]")
        start, stop, _ = key.indices(self._size)
        return self.view(start, max(0, stop - start)).tobytes()

    def close(self) -> None:
        """Unmap every chunk (a map still viewed by an array closes when that is collected)."""
        for m in self._maps:
            try:
                m.close()
            except BufferError:
                pass
