"""The torch dequantizer (model.gguf_loader.dequantize_fast) against the `gguf` package's numpy
one, value for value (the same float32 bits), on every GGML type it has its own kernel for: F32,
F16, Q4_1, Q8_0, and Gemma 3 270M's Q5_0, Q4_K and Q6_K. The blocks are random bytes (every bit
pattern of the nibbles, high bits and packed scales) with finite float16 scales, so nothing
depends on a quantizer; rows of several blocks, as a tensor of shape (rows, row length)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

from model.gguf_loader import FAST_TYPES, TensorInfo, dequantize_fast, dequantize_tensor

# where each type keeps its float16 scales inside a block (byte offsets): kept finite
F16_FIELDS = {"Q4_1": (0, 2), "Q8_0": (0,), "Q5_0": (0,), "Q4_K": (0, 2), "Q6_K": (208,)}


def _blocks(name: str, n_blocks: int, seed: int) -> np.ndarray:
    qt = GGMLQuantizationType[name]
    block, size = GGML_QUANT_SIZES[qt]
    rng = np.random.default_rng(seed)
    if name in ("F32", "F16"):
        dt = np.float32 if name == "F32" else np.float16
        return rng.standard_normal(n_blocks * 64).astype(dt).view(np.uint8)
    raw = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    for off in F16_FIELDS[name]:
        scale = (rng.standard_normal(n_blocks) * 0.05).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(-1)


@pytest.mark.parametrize("name", ["F32", "F16", "Q4_1", "Q8_0", "Q5_0", "Q4_K", "Q6_K"])
def test_fast_dequantizer_equals_the_gguf_package(name):
    qt = GGMLQuantizationType[name]
    assert int(qt) in FAST_TYPES
    block, _ = GGML_QUANT_SIZES[qt]
    n_blocks = 96
    raw = _blocks(name, n_blocks, seed=int(qt))
    n_values = n_blocks * (64 if name in ("F32", "F16") else block)
    rows = 6
    info = TensorInfo(name="t", shape=(rows, n_values // rows), ggml_type=int(qt), offset=0)
    data = raw.tobytes()
    ours = dequantize_fast(data, info, 0)
    assert ours.dtype == torch.float32 and tuple(ours.shape) == info.shape
    theirs = dequantize(raw.reshape(rows, -1), qt).astype(np.float32)
    assert np.isfinite(theirs).all() and theirs.std() > 0
    np.testing.assert_array_equal(ours.numpy().view(np.uint32), theirs.view(np.uint32).reshape(info.shape))
    np.testing.assert_array_equal(dequantize_tensor(data, info, 0), theirs.reshape(info.shape))
