"""Same config + seed -> identical weights and trace in a separate Python process."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from model import ModelConfig, Transformer
from model.trace import flat_arrays

ROOT = Path(__file__).resolve().parents[2]
CFG = dict(vocab_size=31, d_model=16, n_heads=2, n_layers=2, max_len=16, pos_encoding="learned",
           tie_weights=False)
IDS = [[1, 5, 9, 2, 30, 7]]

CHILD = f"""
import io, sys, numpy as np, torch
torch.manual_seed(12345)  # the global RNG must not matter
torch.set_num_threads(int(sys.argv[2]))  # float sums are bit-identical for the same thread count
from model import ModelConfig, Transformer
from model.trace import flat_arrays
m = Transformer(ModelConfig(**{CFG!r}), seed=int(sys.argv[1]))
arrs = {{"param." + k: v.numpy() for k, v in m.state_dict().items()}}
arrs.update({{"trace." + k: v for k, v in flat_arrays(m.trace(torch.tensor({IDS!r}))).items()}})
buf = io.BytesIO(); np.savez(buf, **arrs); sys.stdout.buffer.write(buf.getvalue())
"""


def child_arrays(seed: int) -> dict[str, np.ndarray]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(seed), str(torch.get_num_threads())], cwd=ROOT, capture_output=True,
                         check=True, timeout=120)
    with np.load(io.BytesIO(out.stdout)) as z:
        return {k: z[k] for k in z.files}


def test_same_seed_identical_in_another_process():
    torch.manual_seed(0)
    m = Transformer(ModelConfig(**CFG), seed=42)
    here = {"param." + k: v.numpy() for k, v in m.state_dict().items()}
    here.update({"trace." + k: v for k, v in flat_arrays(m.trace(torch.tensor(IDS))).items()})
    there = child_arrays(42)
    assert set(here) == set(there) and len(here) > 40
    for k in here:
        assert np.array_equal(here[k], there[k]), k


def test_different_seed_differs():
    a = Transformer(ModelConfig(**CFG), seed=1).state_dict()
    b = Transformer(ModelConfig(**CFG), seed=2).state_dict()
    c = Transformer(ModelConfig(**CFG), seed=1).state_dict()
    weights = [k for k in a if a[k].dim() == 2]
    assert weights and all(not torch.equal(a[k], b[k]) for k in weights)
    assert all(torch.equal(a[k], c[k]) for k in a)
