"""The models every page's words are checked against (issue 34 point 1): one list, read by
tests/app/test_words_from_model.py. A model family added later is one more ModelCase here.

Each case says how the app is pointed at the model (the link's query: `src` and, for fresh
weights, the architecture controls; for a family, the tiny model of tests/tiny_families.py opened
from disk) and which ModelSource that is, so the test reads the model's config the way the app does
(ui.models.get_model) and checks every stated shape and component against it."""
from __future__ import annotations

import json
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from model.config import PRESETS, ModelConfig
from model.pretrained import PRETRAINED

FRESH = "fresh weights (your architecture)"  # ui.state.FRESH (not imported: keeps this file Streamlit-free)


@dataclass(frozen=True)
class ModelCase:
    id: str  # the pytest id
    query: dict = field(default_factory=dict)  # the link's query parameters that pick the model
    pretrained: str = ""  # a model.pretrained key: skipped when its package is not installed
    pages: tuple[str, ...] | None = None  # None: every page; else only these (why: see the case)
    family: str = ""  # a tests/tiny_families.py model, built and opened from disk (needs transformers)

    def available(self) -> bool:
        if self.family:
            return importlib.util.find_spec("transformers") is not None
        return not self.pretrained or PRETRAINED[self.pretrained].installed()

    def disk_query(self, folder: Path) -> dict:
        """The link that opens this family's tiny model, built in `folder` (its resolved path)."""
        return {"src": "disk:" + str(folder)}

    def source(self, query: dict | None = None):
        """The ui.models.ModelSource the app builds for this query (a family's: disk_query's)."""
        from ui import models
        q = self.query if query is None else query
        if str(q.get("src", "")).startswith("disk:"):
            return models.ModelSource("disk", q["src"][len("disk:"):])
        if q.get("src") != FRESH:
            src = q.get("src", models.DEFAULT_SOURCE)
            return models.ModelSource("pretrained" if src in models.PRETRAINED else "checkpoint", src)
        cfg = ModelConfig(vocab_size=len(models.fresh_tokenizer()), d_model=int(q.get("d", 64)),
                          n_heads=int(q.get("h", 4)), n_layers=int(q.get("L", 2)), max_len=int(q.get("ctx", 256)),
                          pos_encoding=q.get("pe", "sinusoidal"), norm=q.get("norm", "pre"),
                          activation=q.get("act", "gelu"), d_v=int(q.get("dv", 0)))
        return models.ModelSource("fresh", "fresh", json.dumps(cfg.to_dict(), sort_keys=True), int(q.get("seed", 0)))


def _fresh(**arch) -> dict:
    return {"src": FRESH, **{k: str(v) for k, v in arch.items()}}


_P17, _G2 = PRESETS["vaswani-base"], PRESETS["gpt2-small"]
WORD_PAGES = ("pages/multi-head.py", "pages/layer-norm.py", "pages/positional.py", "pages/ffn-output.py",
              "pages/flow.py", "pages/lesson.py")  # the pages that state the architecture in words

MODEL_CASES = [
    ModelCase("toy-causal", {"src": "causal-lm"}),
    ModelCase("toy-masked", {"src": "masked-lm"}),
    ModelCase("toy-learned-pe", {"src": "causal-lm-learned"}),
    ModelCase("fresh-default", _fresh()),
    # every other choice of the sidebar's architecture controls, in one model
    ModelCase("fresh-learned-post-relu-dv8", _fresh(pe="learned", norm="post", act="relu", dv=8)),
    ModelCase("fresh-2017-preset", _fresh(d=_P17.d_model, h=_P17.n_heads, L=_P17.n_layers, pe=_P17.pos_encoding,
                                          norm=_P17.norm, act=_P17.activation)),
    # GPT-2 small's shapes with fresh weights: the word pages only (the cost page times 12 blocks of
    # d_model 768 at up to 1,024 tokens, about a minute on this machine; every page renders at the
    # 2017 preset's size in tests/app/test_paper_preset.py)
    ModelCase("fresh-gpt2-small", _fresh(d=_G2.d_model, h=_G2.n_heads, L=_G2.n_layers, pe=_G2.pos_encoding,
                                         norm=_G2.norm, act=_G2.activation, ctx=_G2.max_len), pages=WORD_PAGES),
    ModelCase("minilm", {"src": "minilm-l6"}, pretrained="minilm-l6"),
    ModelCase("smollm2", {"src": "smollm2-135m"}, pretrained="smollm2-135m"),
    ModelCase("gemma3", {"src": "gemma3-270m"}, pretrained="gemma3-270m"),
    # every family that loads from disk (issue 32), as the tiny models its parity tests build
    *[ModelCase(f"family-{name}", family=name) for name in (
        "gpt2", "llama", "tinyllama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3", "bert", "roberta",
        "distilbert")],
]
