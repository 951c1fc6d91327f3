"""Read a GGUF file (llama.cpp's format) into float32 tensors of our Transformer: SmolLM2 and other
Llama-style decoders, offline.

    meta, infos, data_start = read_header(data)          # metadata dict, tensor table
    tensors = load_llama_tensors(data, infos, data_start, cfg)   # our names, float32 (llama)

The reader under every GGUF the app opens: the configs, names and per-architecture tensor fixes of
llama, qwen2, qwen3 and gemma2 files are the family importers' (model.families; model.families.disk
loads a .gguf end to end). gguf_to_ours / load_llama_tensors keep the llama tensor table for the
SmolLM2 benchmark and tests.

The header is parsed here with `struct` (gguf.GGUFReader builds a numpy view per vocabulary string:
~9 s for SmolLM2's 98,000 tokens and merges; this parser takes ~0.1 s). The tensor blocks are
dequantized with torch (`dequantize_fast`: Q4_1, Q8_0, F16, F32, value for value what the `gguf`
package's numpy dequantizer gives, ~5x faster) or, for other GGML types, by the `gguf` package.

Q and K rows: llama.cpp's converter permutes the rows of W_Q and W_K of every head from HF's
"rotate_half" layout (rotary pairs (i, i + d/2)) to interleaved pairs (2i, 2i + 1), the layout its
kernels rotate. transformers undoes this when it loads a GGUF (LlamaTensorProcessor); so do we
(`unpermute_qk`), so that q and k, their rotary pairs and every trace field match HF's model, and
model.layers.apply_rope uses HF's rotate_half convention.
"""
from __future__ import annotations

import re
import struct
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

from .config import ModelConfig
from .gguf_chunks import ChunkedFile

GGUF_MAGIC = b"GGUF"
MAX_ARRAY_NESTING = 4  # arrays of arrays a metadata value may nest (llama.cpp writes at most 2)
MAX_TENSOR_DIMS = 4  # GGML_MAX_DIMS
MAX_ALIGNMENT = 1 << 16  # general.alignment: a power of two up to this (llama.cpp writes 32)

# metadata value types (gguf spec): fixed-size ones as struct formats; 8 = string, 9 = array
_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NP = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
       7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # numpy/torch order (the file lists dims innermost first: reversed)
    ggml_type: int
    offset: int  # from the start of the data section


class _Cursor:
    """Little-endian reads from a bytes buffer; ValueError (not struct.error) past its end."""

    def __init__(self, data: bytes, what: str):
        self.data, self.pos, self.what = data, 0, what

    def unpack(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise ValueError(f"{self.what} is truncated (the header ends at byte {len(self.data)})")
        v = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return v[0] if len(v) == 1 else v

    def string(self) -> str:
        n = self.unpack("<Q")
        if self.pos + n > len(self.data):
            raise ValueError(f"{self.what} is truncated (a string runs past the end)")
        s = self.data[self.pos:self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype: int, depth: int = 0):
        if vtype == 8:
            return self.string()
        if vtype == 9:
            itype, n = self.unpack("<I"), self.unpack("<Q")
            if itype == 8:  # a vocabulary: ~100,000 strings, read in one tight loop
                d, pos, out, unpack_from = self.data, self.pos, [], struct.unpack_from
                try:
                    for _ in range(n):
                        (ln,) = unpack_from("<Q", d, pos)
                        out.append(d[pos + 8:pos + 8 + ln].decode("utf-8", errors="replace"))
                        pos += 8 + ln
                except struct.error:
                    raise ValueError(f"{self.what} is truncated (a string array runs past the end)") from None
                if pos > len(d):
                    raise ValueError(f"{self.what} is truncated (a string runs past the end)")
                self.pos = pos
                return out
            if itype in _NP:
                dt = np.dtype(_NP[itype]).newbyteorder("<")
                end = self.pos + n * dt.itemsize
                if end > len(self.data):
                    raise ValueError(f"{self.what} is truncated (an array runs past the end)")
                arr = np.frombuffer(self.data, dtype=dt, count=n, offset=self.pos).copy()
                self.pos = end
                return arr
            if itype == 9:
                if depth >= MAX_ARRAY_NESTING:
                    raise ValueError(f"{self.what}: its metadata nests arrays more than {MAX_ARRAY_NESTING} deep; "
                                     "it is not a GGUF this app reads (convert the model again with llama.cpp)")
                return [self.value(9, depth + 1) for _ in range(n)]
            raise ValueError(f"{self.what}: unknown array item type {itype}")
        if vtype in _FMT:
            return self.unpack(_FMT[vtype])
        raise ValueError(f"{self.what}: unknown metadata value type {vtype}")


def read_header(data: bytes | memoryview, what: str = "the GGUF file"
                ) -> tuple[dict, list[TensorInfo], int]:
    """(metadata, tensor table, offset of the data section) of a GGUF v2/v3 file in memory.
    ValueError naming `what` if it is not GGUF or is cut short. A file in chunks
    (model.gguf_chunks.ChunkedFile): its first chunk, where the header lies."""
    file_bytes = len(data)  # a file in chunks: the joined size (the tensors lie in every chunk)
    if isinstance(data, ChunkedFile):
        data = data.head()
    data = bytes(data) if isinstance(data, memoryview) else data
    if bytes(data[:4]) != GGUF_MAGIC:
        raise ValueError(f"{what} is not a GGUF file (it does not start with b'GGUF')")
    c = _Cursor(data, what)
    c.pos = 4
    version = c.unpack("<I")
    if version not in (2, 3):
        raise ValueError(f"{what}: GGUF version {version} is not supported (2 or 3)")
    n_tensors, n_kv = c.unpack("<Q"), c.unpack("<Q")
    meta: dict = {}
    for _ in range(n_kv):
        key = c.string()
        meta[key] = c.value(c.unpack("<I"))
    infos = []
    for _ in range(n_tensors):
        name = c.string()
        n_dims = c.unpack("<I")
        if n_dims > MAX_TENSOR_DIMS:
            raise ValueError(f"{what}: tensor {name[:80]!r} has {n_dims} dimensions (GGUF allows {MAX_TENSOR_DIMS}); "
                             "the file is damaged: convert the model again with llama.cpp")
        dims = [c.unpack("<Q") for _ in range(n_dims)]
        ggml_type, offset = c.unpack("<I"), c.unpack("<Q")
        infos.append(TensorInfo(name, tuple(reversed(dims)), ggml_type, offset))
    align = meta.get("general.alignment", 32)
    if (isinstance(align, bool) or not isinstance(align, int) or not 0 < align <= MAX_ALIGNMENT
            or align & (align - 1)):
        raise ValueError(f"{what}: general.alignment is {str(align)[:40]}, not a power of two up to {MAX_ALIGNMENT}; "
                         "the file is damaged: convert the model again with llama.cpp")
    data_start = (c.pos + align - 1) // align * align
    check_tensor_table(infos, data_start, file_bytes, what)
    return meta, infos, data_start


def check_tensor_table(infos: list[TensorInfo], data_start: int, file_bytes: int, what: str) -> None:
    """Every tensor of a known GGML type must lie inside the file: its bytes (exact integers, no
    numpy overflow: dims of 2^40 x 2^40 are refused, not wrapped) from its offset. ValueError
    naming the first that does not. Unknown types are left to the importer (which names them)."""
    for info in infos:
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(info.ggml_type)]
        except (ValueError, KeyError):
            continue
        n = 1
        for d in info.shape:
            n *= int(d)
        nbytes = -(-n // block) * type_size
        if data_start + info.offset + nbytes > file_bytes:
            raise ValueError(f"{what}: tensor {info.name[:80]!r} claims {nbytes:,} bytes past the end of the file "
                             "(a damaged or truncated GGUF); download or convert it again")


def tensor_nbytes(info: TensorInfo) -> int:
    """Bytes of one tensor in the file: rows of blocks (gguf's table of block sizes)."""
    block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(info.ggml_type)]
    n = 1
    for d in info.shape:
        n *= int(d)
    if info.shape[-1] % block:
        raise ValueError(f"{info.name}: rows of {info.shape[-1]} values are not whole blocks of {block}")
    return n // block * type_size


def dequantize_tensor(data: bytes | memoryview, info: TensorInfo, data_start: int) -> np.ndarray:
    """float32 array of `info.shape`, dequantized by the gguf package (the reference that
    `dequantize_fast` is tested against, value for value)."""
    qtype = _qtype(info)
    raw = _raw(data, info, data_start)
    rows = int(np.prod(info.shape[:-1]))
    out = dequantize(raw.reshape(rows, raw.size // rows), GGMLQuantizationType(qtype))  # (rows, row_len)
    out = np.ascontiguousarray(out.reshape(info.shape), dtype=np.float32)
    return out if out.flags.writeable else out.copy()  # F32 tensors are views of the file's bytes


def _qtype(info: TensorInfo) -> int:
    try:
        return int(GGMLQuantizationType(info.ggml_type))
    except ValueError:
        raise ValueError(f"{info.name}: unknown GGML tensor type {info.ggml_type}") from None


def _raw(data: bytes | memoryview, info: TensorInfo, data_start: int) -> np.ndarray:
    """The tensor's bytes in the file, (nbytes,) uint8, read-only (a view, no copy)."""
    nbytes = tensor_nbytes(info)
    start = data_start + info.offset
    if start + nbytes > len(data):
        raise ValueError(f"{info.name}: its data runs past the end of the file (truncated)")
    if isinstance(data, ChunkedFile):
        return data.view(start, nbytes)  # a file in chunks (model.gguf_chunks.ChunkedFile)
    return np.frombuffer(data, dtype=np.uint8, count=nbytes, offset=start)


# GGML block layouts (ggml-common.h), the types SmolLM2's file uses:
#   F32   plain float32 values
#   F16   plain float16 values
#   Q8_0  blocks of 32: d (float16), 32 int8 q            x = q * d
#   Q4_1  blocks of 32: d, m (float16), 16 bytes of nibbles: value j in the low nibble of byte j,
#         value j + 16 in its high nibble                  x = d * q + m
# and the types of Gemma 3 270M's Q4_K_M file:
#   Q5_0  blocks of 32: d (float16), qh (32 bits: bit j the 5th bit of value j), 16 bytes of nibbles
#         as Q4_1's                                        x = d * (q - 16)
#   Q4_K  super-blocks of 256: d, dmin (float16), 12 bytes packing 8 six-bit scales and 8 six-bit
#         mins, 128 bytes of nibbles (32 bytes per pair of sub-blocks: sub-block 2i the low nibbles,
#         2i + 1 the high ones)                             x = (d * sc_i) * q - (dmin * m_i)
#   Q6_K  super-blocks of 256: 128 bytes of low nibbles, 64 bytes of 2-bit high parts, 16 int8
#         scales, d (float16)                              x = (d * sc_i) * (q - 32), 16 per scale
F32, F16, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K = 0, 1, 3, 6, 8, 12, 14
FAST_TYPES = (F32, F16, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K)  # dequantize_fast's own kernels


def dequantize_fast(data: bytes | memoryview, info: TensorInfo, data_start: int) -> torch.Tensor:
    """float32 tensor of `info.shape`: the gguf package's dequantization (the same products and
    sums in the same order, so the same float32 values) done by torch's vectorised, multi-threaded
    kernels instead of numpy: ~0.5 s instead of ~2.5 s for SmolLM2's 134.5M values. Other GGML
    types go through the gguf package (dequantize_tensor)."""
    qtype = _qtype(info)
    if qtype not in FAST_TYPES:
        return torch.from_numpy(dequantize_tensor(data, info, data_start))
    with warnings.catch_warnings():  # the file's bytes are read-only; nothing here writes to them
        warnings.simplefilter("ignore", UserWarning)
        raw = torch.from_numpy(_raw(data, info, data_start))  # (nbytes,) uint8
    if qtype == F32:
        out = raw.view(torch.float32).clone()
    elif qtype == F16:
        out = raw.view(torch.float16).to(torch.float32)
    elif qtype == Q8_0:
        blocks = raw.view(-1, 34)  # (n_blocks, 2 + 32)
        d = blocks[:, :2].contiguous().view(torch.float16).to(torch.float32)  # (n_blocks, 1)
        out = blocks[:, 2:].view(torch.int8).to(torch.float32).mul_(d)  # (n_blocks, 32) q * d
    elif qtype == Q5_0:
        out = _q5_0(raw)
    elif qtype == Q4_K:
        out = _q4_k(raw)
    elif qtype == Q6_K:
        out = _q6_k(raw)
    else:  # Q4_1
        blocks = raw.view(-1, 20)  # (n_blocks, 2 + 2 + 16)
        dm = blocks[:, 0:4].contiguous().view(torch.float16).to(torch.float32)  # (n_blocks, 2): d, m
        qs = blocks[:, 4:]  # (n_blocks, 16)
        q = torch.empty(blocks.shape[0], 32, dtype=torch.float32)  # (n_blocks, 32)
        q[:, :16].copy_(qs & 0x0F)  # values 0..15: the low nibbles
        q[:, 16:].copy_(qs >> 4)  # values 16..31: the high nibbles
        out = q.mul_(dm[:, 0:1]).add_(dm[:, 1:2])  # d * q, then + m (two roundings, as numpy's (d * qs) + m)
    return out.view(info.shape)


def _f16(b: torch.Tensor) -> torch.Tensor:
    """(n, 2) uint8 -> (n, 1) float32: a little-endian float16 per row."""
    return b.contiguous().view(torch.float16).to(torch.float32)


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """(n, k) uint8 -> (n, 2, k) uint8: the low nibbles, then the high ones."""
    return torch.stack((qs & 0x0F, qs >> 4), dim=1)


def _q5_0(raw: torch.Tensor) -> torch.Tensor:
    """Q5_0 blocks -> (n_blocks, 32) float32, as gguf.quants.Q5_0: d * float(q - 16)."""
    blocks = raw.view(-1, 22)  # (n, 2 + 4 + 16)
    d = _f16(blocks[:, :2])  # (n, 1)
    qh = blocks[:, 2:6].to(torch.int64)  # (n, 4) little-endian bytes of 32 bits
    qh = qh[:, 0] | (qh[:, 1] << 8) | (qh[:, 2] << 16) | (qh[:, 3] << 24)  # (n,)
    high = ((qh[:, None] >> torch.arange(32)) & 1).to(torch.uint8)  # (n, 32) bit j: value j's 5th bit
    low = _nibbles(blocks[:, 6:]).reshape(-1, 32)  # (n, 32) values 0..15 low nibbles, 16..31 high
    q = (low | (high << 4)).to(torch.float32).sub_(16)  # (n, 32) integers: exact in float32
    return q.mul_(d)  # (n, 32)


def _k_scales(scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K's 12 scale bytes (n, 12) -> (sc, m), each (n, 8) uint8 (gguf.quants.Q4_K.get_scale_min)."""
    s = scales.reshape(-1, 3, 4)
    d, m, m_d = s[:, 0], s[:, 1], s[:, 2]  # (n, 4) each
    sc = torch.cat((d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)), dim=1)  # (n, 8)
    mn = torch.cat((m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)), dim=1)  # (n, 8)
    return sc, mn


def _q4_k(raw: torch.Tensor) -> torch.Tensor:
    """Q4_K super-blocks -> (n, 256) float32, as gguf.quants.Q4_K: (d * sc) * q - (dmin * m)."""
    blocks = raw.view(-1, 144)  # (n, 2 + 2 + 12 + 128)
    n = blocks.shape[0]
    d, dmin = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])  # (n, 1) each
    sc, mn = _k_scales(blocks[:, 4:16])
    scale = (d * sc.to(torch.float32)).view(n, 8, 1)  # (n, 8, 1)
    minus = (dmin * mn.to(torch.float32)).view(n, 8, 1)  # (n, 8, 1)
    qs = blocks[:, 16:].reshape(n, 4, 32)  # 32 bytes per pair of sub-blocks
    q = torch.stack((qs & 0x0F, qs >> 4), dim=2).reshape(n, 8, 32).to(torch.float32)  # (n, 8, 32)
    return q.mul_(scale).sub_(minus).view(n, 256)


def _q6_k(raw: torch.Tensor) -> torch.Tensor:
    """Q6_K super-blocks -> (n, 256) float32, as gguf.quants.Q6_K: (d * sc) * float(q - 32)."""
    blocks = raw.view(-1, 210)  # (n, 128 + 64 + 16 + 2)
    n = blocks.shape[0]
    ql, qh = blocks[:, :128], blocks[:, 128:192]
    scales = blocks[:, 192:208].contiguous().view(torch.int8).to(torch.float32)  # (n, 16)
    d = _f16(blocks[:, 208:210])  # (n, 1)
    scale = (d * scales).view(n, 16, 1)  # (n, 16, 1)
    low = torch.stack((ql.reshape(n, 2, 64) & 0x0F, ql.reshape(n, 2, 64) >> 4), dim=2).reshape(n, 8, 32)
    qh = qh.reshape(n, 2, 1, 32)
    high = torch.cat([(qh >> s) & 0x03 for s in (0, 2, 4, 6)], dim=2).reshape(n, 8, 32)
    q = (low | (high << 4)).to(torch.float32).sub_(32).view(n, 16, 16)  # (n, 16, 16)
    return q.mul_(scale).view(n, 256)


def unpermute_qk(w, n_heads: int):
    """(numpy array or tensor) Undo llama.cpp's permutation of W_Q / W_K rows (n_heads * d_head, D): per head, rows
    (2i, 2i + 1) go back to (i, i + d_head/2). The same as transformers' _reverse_permute_weights."""
    rows = w.shape[0]
    half = rows // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


_TOP = {"token_embd.weight": "tok_emb.weight", "output_norm.weight": "ln_f.weight",
        "output.weight": "lm_head.weight"}
_BLK = {"attn_norm": "ln1", "attn_q": "attn.q_proj", "attn_k": "attn.k_proj", "attn_v": "attn.v_proj",
        "attn_output": "attn.o_proj", "ffn_norm": "ln2", "ffn_gate": "ffn.gate", "ffn_up": "ffn.fc1",
        "ffn_down": "ffn.fc2"}
_BLK_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.weight$")


def gguf_to_ours(name: str) -> str:
    """Our parameter name for a GGUF llama tensor name; ValueError for one we do not know."""
    if name in _TOP:
        return _TOP[name]
    m = _BLK_RE.match(name)
    if m and m.group(2) in _BLK:
        return f"blocks.{m.group(1)}.{_BLK[m.group(2)]}.weight"
    raise ValueError(f"unexpected tensor {name!r} in the GGUF file: not part of a llama decoder "
                     "this importer knows")


def load_llama_tensors(data: bytes | memoryview, infos: list[TensorInfo], data_start: int,
                       cfg: ModelConfig, threads: int = 2) -> dict[str, torch.Tensor]:
    """{our name: float32 tensor} for every tensor of the file, W_Q / W_K rows un-permuted.
    Dequantized in a few threads (numpy releases the GIL in its array arithmetic)."""
    names = [gguf_to_ours(i.name) for i in infos]

    def one(info: TensorInfo) -> torch.Tensor:
        w = dequantize_fast(data, info, data_start)
        if info.name.endswith(".attn_q.weight"):
            w = unpermute_qk(w, cfg.n_heads).contiguous()
        elif info.name.endswith(".attn_k.weight"):
            w = unpermute_qk(w, cfg.kv_heads).contiguous()
        return w

    # biggest first, so the long token embedding does not end up alone at the tail
    order = sorted(range(len(infos)), key=lambda i: -int(np.prod(infos[i].shape)))
    # each worker runs torch single-threaded: nested parallel regions on a busy 2-core machine
    # stall at every op (~15 s instead of ~1 s measured)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            tensors = dict(zip(order, pool.map(lambda i: one(infos[i]), order)))
    finally:
        torch.set_num_threads(before)
    return {names[i]: tensors[i] for i in range(len(infos))}
