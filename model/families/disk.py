"""Open a model the user already has, from disk: a Hugging Face model folder (config.json, one or
several *.safetensors, sharded with model.safetensors.index.json, tokenizer.json) or a .gguf file.
Offline: nothing is ever downloaded.

    from model.pretrained import load_from_disk
    model, tok = load_from_disk("~/.cache/huggingface/hub/models--gpt2/snapshots/<rev>")
    tr = model.trace(torch.tensor([tok.encode("Hello").ids]), causal=True)

Steps (each refusal is a ModelRefused, a ValueError whose one sentence says what is wrong and how
to fix it; load_from_disk and inspect_model raise nothing else for bad input, a Rust panic of
tokenizers or safetensors included):
  1. the path: a folder or a .gguf. Pickle weights (.bin, .pt, .pth, .ckpt, .pkl: loading them can
     run code) are refused, and so is a model that needs its own Python code (auto_map in
     config.json or tokenizer_config.json: trust_remote_code).
  2. the family (model.families): config.json's `architectures` / `model_type`, or the GGUF's
     general.architecture; an unsupported one is refused listing the supported families.
  3. the config: the family's importer turns config.json (or the GGUF metadata) into a ModelConfig,
     then the size it claims is checked before any module is built (check_claimed_size): at most
     MAX_LAYERS layers, no more parameters than the weight files' headers hold (each header entry
     checked against the file's real size: safetensors_header, model.gguf_loader.check_tensor_table),
     and room in the memory available. A 1 KB config claiming 100,000 layers costs nothing.
  4. every tensor's name and shape is checked against that config before any data is read (the
     family's converter runs on meta tensors shaped from the file headers); a shape that disagrees,
     a tensor missing or one the importer does not know is refused naming it.
  5. the tokenizer: tokenizer.json through `tokenizers` (model.tokenizer_json), or the GGUF's own
     vocabulary; none is refused ("the tokenizer is missing").
  6. the tensors are read (float16 / bfloat16 become float32), converted and assigned to a model
     built on the meta device (model.pretrained.assign_weights); eval mode, requires_grad False.

inspect_model(path) runs steps 1-5 without reading tensor data (what the app shows before it
loads, with the float32 size); estimate_float32_bytes(path) is that size. allowed_roots() and
check_allowed(path) say what a server may read (the HF cache and ~/models, plus
ATTENTION_LAB_MODEL_ROOTS; one sentence, PATH_REFUSED, for every path refused, whether it exists or
not); roots=... makes every file a model uses (symlinks followed) lie inside them;
list_cached_models() lists the models in the local HF cache (read only).
"""
from __future__ import annotations

import json
import math
import mmap
import os
import struct
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from safetensors import safe_open

from ..checkpoint import tensor_problems
from ..config import ModelConfig, param_count
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from ..gguf_loader import TensorInfo, dequantize_fast, read_header
from ..tokenizer_json import load_tokenizer, tokenizer_from_gguf
from ..transformer import Transformer
from . import family_for_config, family_for_gguf
from .common import Family, Unknown

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
ROOTS_ENV = "ATTENTION_LAB_MODEL_ROOTS"  # admin-set roots the server may open models from (os.pathsep list)
SAFETENSORS_DTYPES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}  # what is read (as float32)
# every dtype a safetensors header may name, with its size in bytes (integer tensors may sit beside
# the weights, e.g. BERT's position_ids; they are checked, then ignored)
SAFETENSORS_ITEM_BYTES = {**SAFETENSORS_DTYPES, "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
                          "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8, "U64": 8}
Progress = Callable[[float, str], None]  # (fraction done 0..1, what is happening)

# What a file may claim before it is even looked at (the README's "What the server refuses"):
MAX_PATH_CHARS = 1024  # a typed or linked path longer than this is refused unread
MAX_JSON_BYTES = 4_000_000  # config.json, tokenizer_config.json, model.safetensors.index.json
MAX_TOKENIZER_BYTES = 100_000_000  # tokenizer.json (large vocabularies are tens of MB)
MAX_HEADER_BYTES = 100_000_000  # a safetensors JSON header
MAX_TENSORS = 100_000  # tensors named in one model's headers
MAX_LAYERS = 256  # layers a config may claim (the largest open models have about 130)
MAX_DIMS = 8  # dimensions of one tensor (GGUF allows 4)


class ModelRefused(ValueError):
    """Every refusal of load_from_disk and inspect_model: one sentence that says what is wrong and
    how to fix it. A ValueError, so callers that caught ValueError keep working."""


# ---- where models may be read from ---------------------------------------------------------------

def hf_cache_dir() -> Path:
    """The local Hugging Face hub cache: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


MODELS_HOME = "~/models"  # the second default root, beside the HF cache


def allowed_roots() -> list[Path]:
    """The folders a server may open models from: the HF cache and ~/models, plus the admin's
    list in ATTENTION_LAB_MODEL_ROOTS (paths separated by os.pathsep). Resolved."""
    env = os.environ.get(ROOTS_ENV, "").strip()
    roots = [hf_cache_dir(), Path(MODELS_HOME).expanduser()]
    roots += [Path(p).expanduser() for p in env.split(os.pathsep) if p.strip()]
    return list(dict.fromkeys(r.resolve() for r in roots))


# One sentence for every path refused by where it is: the same whether the path exists, is a file,
# a folder or nothing at all, and it names no absolute folder (no oracle of what the server holds).
PATH_REFUSED = ("This path is outside the folders this server may read models from, or holds no model there: "
                "give a model folder or a .gguf file that lies, with every file it uses, inside the Hugging Face "
                f"cache, {MODELS_HOME} or a folder the server's admin names in {ROOTS_ENV}.")


def _inside(p: Path, roots: list[Path]) -> bool:
    return any(p == r or r in p.parents for r in roots)


def check_allowed(path: str | Path, roots: list[Path] | None = None) -> Path:
    """The resolved path (symlinks followed) when it exists inside one of the allowed roots;
    ModelRefused(PATH_REFUSED) otherwise: the same sentence whether it exists or not (a server must
    not read arbitrary files, nor tell what is on its disk)."""
    roots = allowed_roots() if roots is None else [Path(r).resolve() for r in roots]
    text = str(path)
    if not text.strip() or len(text) > MAX_PATH_CHARS:
        raise ModelRefused(PATH_REFUSED)
    try:
        p = Path(text).expanduser().resolve()
        if not _inside(p, roots) or not p.exists():
            raise ModelRefused(PATH_REFUSED)
    except (OSError, ValueError, RuntimeError) as e:  # too long, a NUL byte, a symlink loop
        if isinstance(e, ModelRefused):
            raise
        raise ModelRefused(PATH_REFUSED) from None
    return p


def check_files_inside(files, roots: list[Path]) -> None:
    """Every file a model uses, resolved (symlinks followed), must lie inside a root: a weight file
    that links out of an allowed folder is refused (PATH_REFUSED)."""
    for f in files:
        if not _inside(Path(f).resolve(), roots):
            raise ModelRefused(PATH_REFUSED)


# ---- what a path holds ---------------------------------------------------------------------------

@dataclass(frozen=True)
class DiskModelInfo:
    """What inspect_model found, before any tensor data is read."""

    path: str  # the folder or .gguf file (resolved)
    kind: str  # "folder" | "gguf"
    family: str  # the importer (model.families.FAMILIES key)
    architecture: str  # the checkpoint's own name ("GPT2LMHeadModel", "gguf:llama")
    config: ModelConfig
    weight_files: tuple[str, ...]  # the files tensors are read from
    file_bytes: int  # their size on disk
    float32_bytes: int  # the traced model's parameters in float32 (4 bytes each)
    ignored: tuple[str, ...] = ()  # tensors in the files the traced model does not use (heads, buffers)


def _json(path: Path, what: str, limit: int = MAX_JSON_BYTES) -> dict:
    try:
        if path.stat().st_size > limit:
            raise ModelRefused(f"{what}: {path.name} is {path.stat().st_size:,} bytes, more than the {limit:,} "
                               "a model's JSON file may have here; it is not a model's file (re-save it)")
        d = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ModelRefused(f"{what}: {path.name} nests too deep to be a model's JSON file; re-save it "
                           "(transformers' save_pretrained writes a flat one)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{what}: {path.name} is not readable JSON ({e}); re-save it as UTF-8 JSON") from None
    if not isinstance(d, dict):
        raise ValueError(f"{what}: {path.name} must hold a JSON object")
    return d


def _refuse_remote_code(d: dict, path: Path) -> None:
    if d.get("auto_map") or d.get("trust_remote_code"):
        raise ValueError(f"{path}: this model needs its own Python code (auto_map / trust_remote_code); "
                         "Attention Lab never runs code that comes with a model")


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a model folder: the shards model.safetensors.index.json lists, or
    every *.safetensors. ValueError when there are none, naming pickle files if that is all there is."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        wm = _json(index, str(folder)).get("weight_map")
        if not isinstance(wm, dict) or not wm:
            raise ValueError(f"{index}: no weight_map")
        files = [folder / f for f in dict.fromkeys(wm.values())]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ValueError(f"{folder}: shards listed in model.safetensors.index.json are missing: {missing[:4]}")
        return files
    files = sorted(p for p in folder.glob("*.safetensors") if p.is_file())
    if files:
        return files
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise ValueError(f"{folder}: only pickle weights ({', '.join(pickles[:3])}); they are refused because "
                         "loading a pickle can run code. Convert them to safetensors (model.safetensors)")
    raise ValueError(f"{folder}: no weights (*.safetensors) in this folder")


def safetensors_header(path: Path) -> dict[str, dict]:
    """{tensor name: {"dtype", "shape", "data_offsets"}} of a .safetensors file, from its JSON
    header alone (no tensor data is read), every entry checked: a JSON object of tensors, each a
    known dtype, a shape of at most MAX_DIMS non-negative integers, and data offsets inside the
    file that span exactly shape x dtype bytes (a header cannot claim more data than the file
    holds). ModelRefused for anything else."""
    bad = (f"{path.name} is not a valid safetensors file ({{}}); re-save the weights with safetensors "
           "(save_pretrained or safetensors' save_file)")
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ModelRefused(bad.format("it is too short"))
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES or n + 8 > size:
            raise ModelRefused(bad.format("its header length is wrong"))
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except RecursionError:
        raise ModelRefused(bad.format("its header nests too deep")) from None
    except (UnicodeDecodeError, ValueError):
        raise ModelRefused(bad.format("its header is not readable JSON")) from None
    if not isinstance(header, dict):
        raise ModelRefused(bad.format("its header is not a JSON object of tensors"))
    header.pop("__metadata__", None)
    if len(header) > MAX_TENSORS:
        raise ModelRefused(bad.format(f"its header names {len(header):,} tensors, more than {MAX_TENSORS:,}"))
    data_bytes = size - 8 - n
    for name, entry in header.items():
        if not isinstance(entry, dict):
            raise ModelRefused(bad.format(f"tensor {str(name)[:80]!r} is not described by a JSON object"))
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in SAFETENSORS_ITEM_BYTES:
            raise ModelRefused(bad.format(f"tensor {name[:80]!r} has an unknown dtype"))
        if (not isinstance(shape, list) or len(shape) > MAX_DIMS
                or not all(type(x) is int and x >= 0 for x in shape)):
            raise ModelRefused(bad.format(f"tensor {name[:80]!r} has a shape that is not up to {MAX_DIMS} "
                                          "non-negative integers"))
        nbytes = math.prod(shape) * SAFETENSORS_ITEM_BYTES[dtype]
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(x) is int for x in offsets)
                or not 0 <= offsets[0] <= offsets[1] <= data_bytes or offsets[1] - offsets[0] != nbytes):
            raise ModelRefused(bad.format(f"tensor {name[:80]!r} claims {nbytes:,} bytes that the file does "
                                          "not hold where its header says"))
    return header


def _convert(fam: Family, convert, name: str, t: torch.Tensor, cfg: ModelConfig, what: str) -> dict:
    try:
        return convert(name, t, cfg)
    except Unknown:
        raise ValueError(f"{what}: unexpected tensor {name!r}: not part of a {fam.title} model that this "
                         "importer knows") from None


def check_claimed_size(cfg: ModelConfig, stored_values: int, what: str, *, reserved_bytes: int = 0) -> int:
    """Before any module exists: the parameters the config claims (param_count, arithmetic only)
    against the values the weight files' headers hold (each checked against the file's real
    size) and against the memory available (minus reserved_bytes, what other opens are loading).
    Returns the claimed float32 bytes; ModelRefused saying which claim does not hold."""
    if cfg.n_layers > MAX_LAYERS:
        raise ModelRefused(f"{what}: the config claims {cfg.n_layers:,} layers; this server opens models of at most "
                           f"{MAX_LAYERS} layers (the largest open models have about 130). Check the config's "
                           "layer count (num_hidden_layers, or block_count in a GGUF)")
    claimed = param_count(cfg)
    if claimed > stored_values:
        raise ModelRefused(f"{what}: the config claims {claimed:,} parameters but the weight files hold only "
                           f"{stored_values:,} values; the config and the weights do not belong together "
                           "(put the model's own config.json beside its weights)")
    need = 4 * claimed
    avail = available_memory_bytes()
    if avail is not None and need + reserved_bytes > avail:
        busy = f" ({reserved_bytes / 1e9:.2f} GB are taken by models being opened)" if reserved_bytes else ""
        raise ModelRefused(f"{what}: this model needs {need / 1e9:.2f} GB of memory in float32 and the server has "
                           f"{max(0, avail - reserved_bytes) / 1e9:.2f} GB available{busy}; nothing was loaded. "
                           "Open a smaller model, or try again when other models are closed")
    return need


def meta_model(cfg: ModelConfig) -> Transformer:
    """Transformer(cfg) on the meta device: shapes without memory or random numbers."""
    with torch.device("meta"):
        return Transformer(cfg, init=False)


def _check_shapes(fam: Family, convert, shapes: dict[str, tuple[int, ...]], cfg: ModelConfig,
                  what: str, dtypes: dict[str, str] | None = None) -> tuple[str, ...]:
    """Run the converter on meta tensors of the file's shapes and compare with the model the
    config describes: ValueError naming missing, unexpected or misshapen tensors, or a used one
    that is not floating point (dtypes: safetensors' names). Returns the names of tensors the
    traced model does not use."""
    ours: dict[str, torch.Tensor] = {}
    ignored = []
    for name, shape in shapes.items():
        out = _convert(fam, convert, name, torch.empty(shape, device="meta"), cfg, what)
        if not out:
            ignored.append(name)
        elif dtypes is not None and dtypes.get(name) not in SAFETENSORS_DTYPES:
            raise ValueError(f"{what}: tensor {name!r} is stored as {dtypes.get(name)}; only floating-point "
                             f"weights ({', '.join(SAFETENSORS_DTYPES)}) are read")
        ours.update(out)
    expected = meta_model(cfg).state_dict()
    missing = sorted(set(expected) - set(ours))
    unexpected = sorted(set(ours) - set(expected))
    problems = []
    if missing:
        problems.append(f"missing tensors: {missing[:8]}{' ...' if len(missing) > 8 else ''}")
    if unexpected:
        problems.append(f"unexpected tensors: {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}")
    problems += [f"{n}: shape {tuple(ours[n].shape)} but the config needs {tuple(expected[n].shape)}"
                 for n in sorted(set(expected) & set(ours)) if tuple(ours[n].shape) != tuple(expected[n].shape)]
    if problems:
        raise ValueError(f"{what}: the weights disagree with the config: " + "; ".join(problems[:6]))
    return tuple(ignored)


def _folder_info(folder: Path, roots: list[Path] | None = None, reserved_bytes: int = 0
                 ) -> tuple[DiskModelInfo, Family, dict]:
    what = str(folder)
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise ValueError(f"{folder}: no config.json (a model folder needs config.json, *.safetensors and "
                         "tokenizer.json)")
    hf = _json(cfg_path, what)
    _refuse_remote_code(hf, cfg_path)
    tc = folder / "tokenizer_config.json"
    if tc.is_file():
        _refuse_remote_code(_json(tc, what), tc)
    fam = family_for_config(hf, what)
    files = weight_files(folder)
    if roots is not None:  # every file read, symlinks followed, inside an allowed folder
        check_files_inside([cfg_path, *files, *(x for x in (tc, folder / "tokenizer.json") if x.exists())], roots)
    shapes: dict[str, tuple[int, ...]] = {}
    dtypes: dict[str, str] = {}
    for f in files:
        for name, entry in safetensors_header(f).items():
            shapes[name] = tuple(entry["shape"])
            dtypes[name] = entry.get("dtype")
        if len(shapes) > MAX_TENSORS:
            raise ModelRefused(f"{what}: the weight files name more than {MAX_TENSORS:,} tensors; this is not a "
                               "model this server opens")
    cfg = fam.config(hf, frozenset(shapes), what)
    check_claimed_size(cfg, sum(math.prod(s) for s in shapes.values()), what, reserved_bytes=reserved_bytes)
    ignored = _check_shapes(fam, fam.convert, shapes, cfg, what, dtypes)
    info = DiskModelInfo(path=str(folder), kind="folder", family=fam.name, architecture=cfg.architecture,
                         config=cfg, weight_files=tuple(str(f) for f in files),
                         file_bytes=sum(f.stat().st_size for f in files), float32_bytes=4 * param_count(cfg),
                         ignored=ignored)
    return info, fam, hf


def _open_gguf(path: Path):
    """(mmap of the file, metadata, tensor table, data offset)."""
    f = open(path, "rb")
    try:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except ValueError:  # an empty file
        raise ValueError(f"{path} is not a GGUF file (it is empty)") from None
    finally:
        f.close()
    meta, infos, start = read_header(mm, what=str(path))
    return mm, meta, infos, start


def _gguf_info(path: Path, meta: dict, infos: list[TensorInfo], data, start: int, reserved_bytes: int = 0
               ) -> tuple[DiskModelInfo, Family]:
    what = str(path)
    arch = meta.get("general.architecture")
    fam = family_for_gguf(arch, what)
    shapes = {i.name: i.shape for i in infos}
    for i in infos:
        try:
            GGML_QUANT_SIZES[GGMLQuantizationType(i.ggml_type)]
        except (ValueError, KeyError):
            raise ValueError(f"{what}: tensor {i.name!r} has GGML type {i.ggml_type}, which is not supported") from None
    if fam.gguf_config_tensors:  # small tensors the config reads (llama: rope_freqs.weight)
        values = {i.name: dequantize_fast(data, i, start) for i in infos if i.name in fam.gguf_config_tensors}
        cfg = fam.gguf_config(meta, shapes, what, values=values)
    else:
        cfg = fam.gguf_config(meta, shapes, what)  # names with their shapes
    check_claimed_size(cfg, sum(math.prod(i.shape) for i in infos), what, reserved_bytes=reserved_bytes)
    ignored = tuple(n for n in _check_shapes(fam, fam.gguf_convert, shapes, cfg, what)
                    if n not in fam.gguf_config_tensors)
    info = DiskModelInfo(path=str(path), kind="gguf", family=fam.name, architecture=cfg.architecture,
                         config=cfg, weight_files=(str(path),), file_bytes=len(data),
                         float32_bytes=4 * param_count(cfg), ignored=ignored)
    return info, fam


def _resolve(path: str | Path) -> Path:
    if len(str(path)) > MAX_PATH_CHARS:
        raise ModelRefused(f"the path is {len(str(path)):,} characters long, more than the {MAX_PATH_CHARS:,} a model's "
                           "path may have here; give a shorter path")
    try:
        p = Path(path).expanduser()
        if not p.exists():
            raise ModelRefused(f"{p}: no such file or folder; check the path")
        p = p.resolve()
    except (OSError, RuntimeError) as e:
        raise ModelRefused(f"the path cannot be read ({e.strerror or e}); check the path") from None
    if p.is_file():
        if p.suffix in PICKLE_SUFFIXES:
            raise ValueError(f"{p}: pickle weights are refused (loading a pickle can run code); use a "
                             "safetensors model folder or a .gguf file")
        if p.suffix == ".safetensors":
            raise ValueError(f"{p}: open the model's folder (config.json, *.safetensors, tokenizer.json), "
                             "not one of its weight files")
        if p.suffix != ".gguf":
            raise ValueError(f"{p}: not a model folder or a .gguf file")
    return p


def _is_panic(e: BaseException) -> bool:
    """pyo3's PanicException (a Rust panic inside tokenizers or safetensors on a malformed file):
    a BaseException that is not KeyboardInterrupt, SystemExit or GeneratorExit."""
    return type(e).__name__ == "PanicException"


def _refusal(e: BaseException) -> ModelRefused:
    """The one exception a bad file ends in: a ModelRefused as it is, a ValueError's sentence as a
    ModelRefused, anything else a damaged-file sentence (never a traceback)."""
    if isinstance(e, ModelRefused):
        return e
    if isinstance(e, ValueError):
        return ModelRefused(str(e))
    if isinstance(e, MemoryError):
        return ModelRefused("the model does not fit in the memory this server has left; nothing was loaded. "
                            "Open a smaller model")
    detail = str(e).splitlines()[0][:200] if str(e) else ""
    return ModelRefused(f"the files could not be read as a model ({type(e).__name__}{': ' + detail if detail else ''}); "
                        "they are damaged or not a model this app reads: re-save the model with safetensors "
                        "(save_pretrained) or llama.cpp's GGUF converter")


def inspect_model(path: str | Path, *, roots: list[Path] | None = None, reserved_bytes: int = 0) -> DiskModelInfo:
    """Everything load_from_disk checks, without reading tensor data (but the few small values a
    config needs: a Llama 3.1+ GGUF's rotary factors): the family, the config, the claimed size
    (check_claimed_size, before any module is built), every tensor's name and shape against it,
    the tokenizer's presence. ModelRefused with the reason. roots: every file must resolve inside
    one of these folders; reserved_bytes: memory other opens are taking."""
    try:
        return _inspect(path, roots, reserved_bytes)
    except Exception as e:  # noqa: BLE001  every bad input ends in one sentence
        raise _refusal(e) from None
    except BaseException as e:  # a Rust library's panic (tokenizers, safetensors) is a BaseException
        if _is_panic(e):
            raise _refusal(e) from None
        raise


def _inspect(path: str | Path, roots: list[Path] | None, reserved_bytes: int) -> DiskModelInfo:
    p = _resolve(path)
    if roots is not None:
        check_files_inside([p], roots)
    if p.is_dir():
        info, _, hf = _folder_info(p, roots, reserved_bytes)
        if not (p / "tokenizer.json").is_file():
            raise ValueError(f"{p}: no tokenizer.json; the tokenizer is missing (a model folder needs "
                             "config.json, *.safetensors and tokenizer.json)")
        return info
    mm, meta, infos, start = _open_gguf(p)
    try:
        info, _ = _gguf_info(p, meta, infos, mm, start, reserved_bytes)
        if not meta.get("tokenizer.ggml.tokens"):
            raise ValueError(f"{p}: the GGUF holds no tokenizer (tokenizer.ggml.tokens); the tokenizer is missing")
        return info
    finally:
        del meta, infos
        try:
            mm.close()
        except BufferError:
            pass


def estimate_float32_bytes(path: str | Path) -> int:
    """Bytes the model's parameters take once loaded (float32), from the headers alone."""
    return inspect_model(path).float32_bytes


def available_memory_bytes() -> int | None:
    """Memory the system can still give (Linux MemAvailable; a cgroup limit when lower); None
    when unknown."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    try:  # a container's limit (cgroup v2) minus what it uses
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        if limit != "max":
            room = max(0, int(limit) - used)
            avail = room if avail is None else min(avail, room)
    except (OSError, ValueError):
        pass
    return avail


# ---- loading ------------------------------------------------------------------------------------

def assign_weights(cfg: ModelConfig, tensors: dict[str, torch.Tensor], model: Transformer | None = None
                   ) -> Transformer:
    """Transformer(cfg) carrying exactly `tensors` (our names), built without initialisation:
    the modules are made on the meta device (no memory, no random numbers) and the tensors are
    assigned in place of the meta parameters. ValueError naming any missing, unexpected or
    misshapen tensor (with both shapes), a wrong dtype or a non-finite value. The one assignment
    every pretrained model goes through (model.pretrained re-exports it). model: a meta_model(cfg)
    already built (it is filled in place)."""
    model = meta_model(cfg) if model is None else model
    problems = tensor_problems(model.state_dict(), tensors)
    if problems:
        raise ValueError("the weights do not fit the model: " + "; ".join(problems[:6]))
    model.load_state_dict(tensors, strict=True, assign=True)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:  # every parameter and buffer must now hold real data
        raise ValueError(f"tensors left without data after loading: {left[:8]}")
    model.requires_grad_(False)
    model.eval()
    return model


def _assign(cfg: ModelConfig, tensors: dict[str, torch.Tensor], what: str) -> Transformer:
    try:
        return assign_weights(cfg, tensors)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None


def _fit_tokenizer(tok, cfg: ModelConfig, what: str):
    n = len(tok)
    if n > cfg.vocab_size:
        raise ValueError(f"{what}: the tokenizer has {n:,} tokens but the model only {cfg.vocab_size:,} "
                         "embedding rows; they do not belong together")
    if n < cfg.vocab_size:
        if hasattr(tok, "pad_vocab"):
            tok.pad_vocab(cfg.vocab_size)
        else:  # every row gets a label (ids past the tokenizer's are never produced by it)
            tok.vocab = list(tok.vocab) + [f"<unused {i}>" for i in range(n, cfg.vocab_size)]
    return tok


def load_folder(folder: Path, progress: Progress | None = None, roots: list[Path] | None = None,
                reserved_bytes: int = 0) -> tuple[Transformer, object]:
    info, fam, hf = _folder_info(folder, roots, reserved_bytes)
    what = str(folder)
    tok = _fit_tokenizer(load_tokenizer(folder, hf), info.config, what)
    cfg = info.config
    tensors: dict[str, torch.Tensor] = {}
    files = [Path(f) for f in info.weight_files]
    total = max(1, sum(f.stat().st_size for f in files))
    done = 0
    for f in files:
        with safe_open(str(f), framework="pt") as st:
            names = list(st.keys())
            size = f.stat().st_size
            for k, name in enumerate(names):
                t = st.get_tensor(name)
                if t.is_floating_point() and t.dtype != torch.float32:
                    t = t.to(torch.float32)
                tensors.update(_convert(fam, fam.convert, name, t, cfg, what))
                if progress is not None and (k % 16 == 0 or k == len(names) - 1):
                    progress(min(0.99, (done + size * (k + 1) / max(1, len(names))) / total),
                             f"reading {f.name}: {k + 1}/{len(names)} tensors")
            done += size
    model = _assign(cfg, tensors, what)
    if progress is not None:
        progress(1.0, "loaded")
    return model, tok


def gguf_model(data, meta: dict, infos: list[TensorInfo], start: int, what: str, *,
               progress: Progress | None = None, threads: int = 2, reserved_bytes: int = 0,
               verify: Callable[[], None] | None = None) -> tuple[Transformer, object]:
    """(model, tokenizer) from a GGUF already in memory or mapped (`data`: bytes or mmap, with
    its parsed header): the family by general.architecture, its config, the file's own tokenizer,
    every tensor dequantized to float32 (model.gguf_loader.dequantize_fast) in a few threads and
    converted by the family (llama: W_Q / W_K un-permuted; gemma2: norms - 1). verify: called
    once the tokenizer is being built and before any tensor is read (a file's hash check: it
    raises to refuse the file)."""
    info, fam = _gguf_info(Path(what), meta, infos, data, start, reserved_bytes)
    cfg = info.config
    # the tokenizer is built while the tensors are dequantized: building it is Python (a GGUF
    # without merges, as Gemma's, derives them from 262,144 tokens: seconds), the dequantization
    # torch, the dequantization's kernels, that release the GIL): one of the pool's workers takes
    # it first, the others start on the tensors and it joins them when done
    pool = ThreadPoolExecutor(max_workers=max(1, threads))
    tok_future = pool.submit(tokenizer_from_gguf, meta, what)
    if verify is not None:
        try:
            verify()
        except BaseException:
            tok_future.cancel()
            pool.shutdown(wait=False)
            raise
    # biggest first, so the long token embedding does not end up alone at the tail
    order = sorted(range(len(infos)), key=lambda i: -int(np.prod(infos[i].shape)))
    tensors: dict[str, torch.Tensor] = {}
    done = [0]

    def one(i: int) -> dict:
        out = _convert(fam, fam.gguf_convert, infos[i].name, dequantize_fast(data, infos[i], start), cfg, what)
        done[0] += 1
        if progress is not None:
            progress(min(0.99, done[0] / len(infos)), f"dequantizing {done[0]}/{len(infos)} tensors")
        return out

    # each worker runs torch single-threaded: nested parallel regions on a busy 2-core machine
    # stall at every op (model.gguf_loader.load_llama_tensors)
    # The tokenizer thread runs Python and holds the GIL; each dequantizing worker needs it for a
    # moment between torch kernels. A shorter switch interval while both run hands it over sooner
    # (measured: Gemma 3's load ~1.5x faster with 0.2 ms than with the default 5 ms). Restored after.
    before, interval = torch.get_num_threads(), sys.getswitchinterval()
    torch.set_num_threads(1)
    sys.setswitchinterval(min(interval, 0.0002))
    try:
        with pool:
            for out in pool.map(one, order):
                tensors.update(out)
            tok = _fit_tokenizer(tok_future.result(), cfg, what)
    finally:
        torch.set_num_threads(before)
        sys.setswitchinterval(interval)
    model = _assign(cfg, tensors, what)
    if progress is not None:
        progress(1.0, "loaded")
    return model, tok


def load_gguf(path: Path, progress: Progress | None = None, threads: int = 2, reserved_bytes: int = 0
              ) -> tuple[Transformer, object]:
    """(model, tokenizer) of a .gguf file, read through a memory map (gguf_model)."""
    mm, meta, infos, start = _open_gguf(path)
    try:
        return gguf_model(mm, meta, infos, start, str(path), progress=progress, threads=threads,
                          reserved_bytes=reserved_bytes)
    finally:
        del meta, infos
        try:
            mm.close()
        except BufferError:  # a view still alive: the map closes when it is collected
            pass


def load_from_disk(path: str | Path, *, progress: Progress | None = None, roots: list[Path] | None = None,
                   reserved_bytes: int = 0) -> tuple[Transformer, object]:
    """(model, tokenizer) of a model folder or a .gguf file the user has (module docstring):
    offline, validated, float32, eval mode, requires_grad False. Every refusal is a ModelRefused
    (a ValueError) with one sentence saying what is wrong and how to fix it; nothing else is raised
    for bad input. The claimed size is checked before any module is built (check_claimed_size).
    progress(fraction, message) is called as tensors are read; roots: every file must resolve
    inside one of these folders; reserved_bytes: memory other opens are taking."""
    try:
        p = _resolve(path)
        if roots is not None:
            check_files_inside([p], roots)
        if p.is_dir():
            return load_folder(p, progress, roots, reserved_bytes)
        return load_gguf(p, progress, reserved_bytes=reserved_bytes)
    except Exception as e:  # noqa: BLE001  every bad input ends in one sentence
        raise _refusal(e) from None
    except BaseException as e:  # a Rust library's panic (tokenizers, safetensors) is a BaseException
        if _is_panic(e):
            raise _refusal(e) from None
        raise


# ---- the local Hugging Face cache ------------------------------------------------------------------

@dataclass(frozen=True)
class CachedModel:
    """A model found in the local HF cache (list_cached_models)."""

    repo: str  # "HuggingFaceTB/SmolLM2-135M"
    path: str  # the snapshot folder, or the .gguf file
    kind: str  # "folder" | "gguf"
    file_bytes: int  # the weight files' size on disk
    architecture: str  # config.json's architectures[0] (folders), "gguf" for a GGUF file


def _size(p: Path) -> int:
    try:
        return p.stat().st_size  # follows the cache's symlinks to its blobs
    except OSError:
        return 0


def list_cached_models(cache: str | Path | None = None) -> list[CachedModel]:
    """Models in the local HF cache (models--org--name/snapshots/<rev>/): folders with config.json
    and safetensors weights, and .gguf files, with their size. Reads directory listings and
    config.json only; never downloads, never writes. Sorted by repo."""
    root = Path(cache).expanduser() if cache is not None else hf_cache_dir()
    out: list[CachedModel] = []
    if not root.is_dir():
        return out
    for repo_dir in sorted(root.glob("models--*")):
        repo = repo_dir.name[len("models--"):].replace("--", "/")
        snaps = repo_dir / "snapshots"
        if not snaps.is_dir():
            continue
        for snap in sorted(snaps.iterdir()):
            if not snap.is_dir():
                continue
            sts = sorted(snap.glob("*.safetensors"))
            if (snap / "config.json").is_file() and sts:
                try:
                    hf = json.loads((snap / "config.json").read_text(encoding="utf-8"))
                    arch = (hf.get("architectures") or [hf.get("model_type", "?")])[0]
                except (OSError, ValueError):
                    arch = "?"
                out.append(CachedModel(repo=repo, path=str(snap), kind="folder",
                                       file_bytes=sum(_size(f) for f in sts), architecture=str(arch)))
            for g in sorted(snap.rglob("*.gguf")):
                out.append(CachedModel(repo=repo, path=str(g), kind="gguf", file_bytes=_size(g),
                                       architecture="gguf"))
    return out
