"""Checkpoints: safetensors only, never pickle.

On disk a checkpoint is a directory (or a .zip of one) with `config.json` (kind, model config,
tokenizer with its vocabulary) and `model.safetensors`. The same JSON is also stored in the
safetensors header metadata, so a single `.safetensors` file is a complete checkpoint (this is
what the app's upload accepts). Loading validates names, shapes and dtypes against the config
and raises ValueError saying exactly what does not match.
"""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load_bytes
from safetensors.torch import save as st_save_bytes

from .config import ModelConfig, param_count
from .seq2seq import Seq2SeqTransformer
from .tokenizer import Tokenizer
from .transformer import Transformer

FORMAT_VERSION = 1
MAX_BYTES = 200 * 1024 * 1024
CHECKPOINT_DIR = Path(__file__).resolve().parent.parent / "checkpoints"  # the shipped checkpoints


def shipped_checkpoints(root: str | Path = CHECKPOINT_DIR, kind: str | None = "transformer") -> dict[str, dict]:
    """{name: config.json contents} for every checkpoint directory under root (config.json and
    model.safetensors present), sorted by name; only those of `kind` ("transformer", "seq2seq";
    None = every kind). The one list of shipped checkpoints: the app caches it (ui/models.py),
    training and the tests read it."""
    root, out = Path(root), {}
    if root.is_dir():
        for d in sorted(root.iterdir()):
            if (d / "config.json").is_file() and (d / "model.safetensors").is_file():
                meta = json.loads((d / "config.json").read_text())
                if kind is None or meta.get("kind", "transformer") == kind:
                    out[d.name] = meta
    return out


def _model_kinds() -> dict[str, type]:
    """The model classes a checkpoint's "kind" names."""
    return {"transformer": Transformer, "seq2seq": Seq2SeqTransformer}


def _kind_of(model) -> str:
    for name, cls in _model_kinds().items():
        if type(model) is cls:
            return name
    raise ValueError(f"cannot save a {type(model).__name__}")


def checkpoint_meta(model, tok: Tokenizer, extra: dict | None = None) -> dict:
    meta = {"format_version": FORMAT_VERSION, "kind": _kind_of(model), "config": model.cfg.to_dict(),
            "tokenizer": tok.to_dict()}
    if extra:
        meta["extra"] = extra
    return meta


def to_bytes(model, tok: Tokenizer, extra: dict | None = None) -> bytes:
    """One self-contained .safetensors file (config + vocabulary in the header metadata)."""
    meta = checkpoint_meta(model, tok, extra)
    tensors = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    return st_save_bytes(tensors, metadata={"attention_lab": json.dumps(meta)})


def save_checkpoint(model, tok: Tokenizer, path: str | Path, extra: dict | None = None) -> Path:
    """Write directory `path` with config.json and model.safetensors."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    meta = checkpoint_meta(model, tok, extra)
    (path / "config.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    (path / "model.safetensors").write_bytes(to_bytes(model, tok, extra))
    return path


def _read_header_meta(data: bytes) -> dict | None:
    if len(data) < 8:
        raise ValueError("not a safetensors file: it is shorter than its 8-byte header length")
    n = int.from_bytes(data[:8], "little")
    if n <= 0 or n > len(data) - 8 or n > 100_000_000:
        raise ValueError("not a safetensors file (or it is truncated): the header length does not fit the file")
    try:
        header = json.loads(data[8:8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError("not a safetensors file: its header is not JSON") from None
    if not isinstance(header, dict):
        raise ValueError("not a safetensors file: its header is not a JSON object")
    meta = (header.get("__metadata__") or {}).get("attention_lab")
    return json.loads(meta) if meta else None


def _looks_like_pickle(data: bytes) -> bool:
    """Pickle (protocol 2+ starts with 0x80 <protocol>) or gzip, unless the bytes parse as a
    safetensors header: its first 8 bytes are a little-endian header length, which may well start
    with 0x80 (a 7,552-byte header is b"\\x80\\x1d..."), followed by a JSON object."""
    if data[:2] == b"\x1f\x8b":
        return True
    if len(data) < 9:  # too short for either: refused as "shorter than its header length"
        return False
    n = int.from_bytes(data[:8], "little")
    if 8 + n <= len(data) and data[8:9] == b"{":
        return False
    return data[:1] == b"\x80"


def from_bytes(data: bytes, meta: dict | None = None, max_bytes: int = MAX_BYTES):
    """Build (model, tokenizer) from safetensors bytes; `meta` overrides the header metadata."""
    if len(data) > max_bytes:
        raise ValueError(f"checkpoint is {len(data) / 1e6:.1f} MB; the limit is {max_bytes / 1e6:.0f} MB")
    if data[:2] == b"PK":
        return _from_zip(data, max_bytes)
    if _looks_like_pickle(data):
        raise ValueError("this looks like a pickle / torch.save file; only .safetensors checkpoints are accepted (never pickle)")
    header_meta = _read_header_meta(data)
    meta = meta or header_meta
    if meta is None:
        raise ValueError("the safetensors file has no Attention Lab config in its metadata; "
                         "save it with model.checkpoint.save_checkpoint or upload the config.json beside it")
    try:
        tensors = st_load_bytes(data)
    except (SafetensorError, Exception) as e:  # safetensors raises its own error types
        raise ValueError(f"could not read the safetensors data (truncated or corrupt?): {e}") from None
    return build_validated(meta, tensors)


def build_validated(meta: dict, tensors: dict[str, torch.Tensor]):
    if not isinstance(meta, dict):
        raise ValueError("config must be a JSON object")
    kind = meta.get("kind", "transformer")
    kinds = _model_kinds()
    if kind not in kinds:
        raise ValueError(f"unknown model kind {kind!r}; expected one of {sorted(kinds)}")
    cfg = ModelConfig.from_dict(meta.get("config", {}))
    tok = Tokenizer.from_dict(meta.get("tokenizer"))
    if len(tok) != cfg.vocab_size:
        raise ValueError(f"tokenizer has {len(tok)} entries but config.vocab_size is {cfg.vocab_size}")
    # Never allocate a model far larger than the tensors the file holds (a few-byte config could
    # otherwise ask for billions of parameters before any shape is checked).
    n_cfg, n_file = param_count(cfg), sum(int(t.numel()) for t in tensors.values())
    if n_cfg > 4 * n_file + 1_000_000:
        raise ValueError(f"the config describes {n_cfg:,} parameters but the file holds only "
                         f"{n_file:,} values; the config and the weights do not belong together")
    model = kinds[kind](cfg, seed=0)
    problems = tensor_problems(model.state_dict(), tensors)
    if problems:
        raise ValueError("checkpoint does not match its config: " + "; ".join(problems[:6]))
    model.load_state_dict(tensors, strict=True)
    model.eval()
    return model, tok


def tensor_problems(expected: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor]) -> list[str]:
    """What keeps `tensors` from loading into a model whose state_dict is `expected` (which may
    live on the meta device): missing and unexpected names, each shape mismatch naming the tensor
    and both shapes, wrong dtypes, NaN or infinity. Empty when everything fits."""
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    problems = []
    if missing:
        problems.append(f"missing tensors: {missing[:8]}{' ...' if len(missing) > 8 else ''}")
    if unexpected:
        problems.append(f"unexpected tensors: {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}")
    for name in sorted(set(expected) & set(tensors)):
        e, t = expected[name], tensors[name]
        if tuple(t.shape) != tuple(e.shape):
            problems.append(f"{name}: shape {tuple(t.shape)} but the config needs {tuple(e.shape)}")
        elif t.dtype != e.dtype:
            problems.append(f"{name}: dtype {t.dtype} but expected {e.dtype}")
        elif not bool(torch.isfinite(t.sum())) and not bool(torch.isfinite(t).all()):
            # a finite sum proves every value finite (NaN and inf propagate) and costs ~20x less
            # than isfinite over 134M values; a non-finite sum (or an overflow) is checked exactly
            problems.append(f"{name}: contains NaN or infinity")
    return problems


def _from_zip(data: bytes, max_bytes: int):
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise ValueError("the zip file is truncated or corrupt") from None
    with zf:
        names = {Path(n).name: n for n in zf.namelist()}
        if any(n.endswith(".pkl") for n in names):  # torch.save writes a zip holding data.pkl
            raise ValueError("this looks like a pickle / torch.save file; only .safetensors "
                             "checkpoints are accepted (never pickle)")
        if "model.safetensors" not in names:
            raise ValueError("the zip must contain model.safetensors (and config.json)")
        for n in ("model.safetensors", "config.json"):
            if n in names and zf.getinfo(names[n]).file_size > max_bytes:
                raise ValueError(f"{n} in the zip is larger than the {max_bytes / 1e6:.0f} MB limit")
        meta = json.loads(zf.read(names["config.json"])) if "config.json" in names else None
        return from_bytes(zf.read(names["model.safetensors"]), meta=meta, max_bytes=max_bytes)


def load_checkpoint(path: str | Path, max_bytes: int = MAX_BYTES):
    """(model, tokenizer) from a checkpoint directory, a .zip of one, or a single .safetensors."""
    path = Path(path)
    if path.is_dir():
        st_path, cfg_path = path / "model.safetensors", path / "config.json"
        if not st_path.exists():
            raise ValueError(f"{path} has no model.safetensors")
        meta = json.loads(cfg_path.read_text()) if cfg_path.exists() else None
        return from_bytes(st_path.read_bytes(), meta=meta, max_bytes=max_bytes)
    if not path.exists():
        raise ValueError(f"no checkpoint at {path}")
    return from_bytes(path.read_bytes(), max_bytes=max_bytes)
