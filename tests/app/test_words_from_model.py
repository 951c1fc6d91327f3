"""Every sentence true for the model on screen (issue 34 point 1). For each model of
tests/model_cases.py, every page renders, and what the pages state about the architecture —
shapes of W_Q, W_K, W_V, W_O (grouped-query attention included), biases, the norm and its ε, how
positions enter, the FFN's activation, the parameter formulas, the stack — is checked against the
model's own config (read as the app reads it, ui.models.get_model). Sentences written for another
architecture must not appear: each is generated from the same config with one option changed
(classroom.architecture.describe) and searched for on every page.

On today's main this fails: SmolLM2's W_K was stated 576 × 576, its output title read "+ b", its
ε was called "BERT's", its positional page opened with the sinusoidal sentence."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from classroom.architecture import describe, param_formulas
from model.config import NORM_KINDS, NORMS, POS_ENCODINGS
from tests.helpers import all_text, app_pages, app_test, errors, figures
from tests.model_cases import MODEL_CASES, ModelCase

PAGES = app_pages()
CASES = [pytest.param(c, p, id=f"{c.id}-{p.split('/')[-1][:-3]}") for c in MODEL_CASES for p in PAGES
         if c.pages is None or p in c.pages]
# pages about their own fixed models (not the sidebar's): their words are checked by their own tests
OWN_MODELS = {"pages/calculator.py", "pages/variants.py", "pages/gradients.py", "pages/encoder-decoder.py",
              "pages/kv-cache.py"}


@pytest.fixture(scope="module")
def family_folders(tmp_path_factory):
    """{family: resolved folder} of the tiny family models, built on first use, in a folder the
    server may open (ATTENTION_LAB_MODEL_ROOTS, as tests/app/test_disk_models.py)."""
    root = tmp_path_factory.mktemp("word-models")
    old = os.environ.get("ATTENTION_LAB_MODEL_ROOTS")
    os.environ["ATTENTION_LAB_MODEL_ROOTS"] = str(root)
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            from tests.tiny_families import build
            built[name] = build(name, root / name).resolve()
        return built[name]
    yield get
    if old is None:
        os.environ.pop("ATTENTION_LAB_MODEL_ROOTS", None)
    else:
        os.environ["ATTENTION_LAB_MODEL_ROOTS"] = old


@pytest.fixture(scope="module")
def sessions(family_folders):
    """One app session per model case, opened once and reused page after page: (AppTest, cfg,
    Architecture read as the app reads them)."""
    cache: dict = {}

    def get(case: ModelCase):
        if case.id not in cache:
            from ui import disk_models, models
            query = case.disk_query(family_folders(case.family)) if case.family else case.query
            at = app_test(default_timeout=300)
            for k, v in query.items():
                at.query_params[k] = v
            at.run()
            assert not errors(at), errors(at)
            if case.family:  # the link starts loading the model; the run after the load shows it
                job = disk_models.registry().job(query["src"][len("disk:"):])
                assert job is not None and job.done.wait(120), [e.value for e in at.error]
                at.run()
                assert at.session_state["src"] == query["src"], [e.value for e in at.error]
            src = case.source(query)
            cfg = models.get_model(src)[0].cfg
            cache[case.id] = (at, cfg, describe(cfg, eps_source=models.eps_source(src, cfg)))
        return cache[case.id]
    return get


def page_text(at) -> str:
    """Everything a reader sees as words: markdown, captions, alerts, titles, tables, figure titles,
    LaTeX and the sidebar."""
    parts = [all_text(at)]
    parts += [str(x.value) for x in at.get("latex")]
    for d in at.dataframe:
        v = d.value
        parts.append(v.to_string() if hasattr(v, "to_string") else str(v))
    for f in figures(at):
        parts.append(str((f["layout"].get("title") or {}).get("text") or ""))
    return "\n".join(parts)


def _alternatives(cfg):
    """describe() of the same config with one architectural option changed (where valid)."""
    out = []
    for field, values in (("pos_encoding", POS_ENCODINGS), ("norm", NORMS), ("norm_kind", NORM_KINDS),
                          ("activation", ("gelu", "relu", "swiglu"))):
        for v in values:
            if v == getattr(cfg, field):
                continue
            try:
                out.append((field, v, describe(cfg.replace(**{field: v}))))
            except ValueError:  # e.g. rotary needs an even d_k
                continue
    return out


def open_case(sessions, case: ModelCase, page: str):
    if not case.available():
        pytest.skip(f"SKIPPED LOUDLY: {case.pretrained or 'transformers'} is not installed "
                    "(requirements-models.txt / requirements-dev.txt)")
    at, cfg, arch = sessions(case)
    if page == "pages/lesson.py":
        at.session_state["lesson_step"] = 1
    at.switch_page(page).run()
    assert not errors(at), errors(at)
    if page == "pages/lesson.py":  # reveal step 1 (its text states X and the norm)
        show = [b for b in at.button if (b.key or "").startswith("lesson_show_")]
        if show:
            show[0].click().run()
            assert not errors(at), errors(at)
    return at, cfg, arch


@pytest.mark.parametrize("case,page", CASES)
def test_page_words_match_the_model(sessions, case: ModelCase, page: str) -> None:
    at, cfg, arch = open_case(sessions, case, page)
    text = page_text(at)
    assert "BERT's; PyTorch's default" not in text  # the old ε sentence, whatever the model
    if case.query.get("src") != "fresh weights (your architecture)" or case.family:
        assert arch.summary in text  # the sidebar states the model from its config
    if page in OWN_MODELS:
        return
    for absent, mark in ((not cfg.bias_out, r"\+ b_O"), (not cfg.bias_ffn, r"\+ b(?:₁|₂|_gate|_up)"),
                         (not (cfg.bias_qkv or cfg.bias_out), r"\+ bias \(")):
        m = re.search(mark, text) if absent else None
        assert m is None, f"a bias stated that the model does not have: …{text[max(0, m.start() - 80): m.end() + 40]}…"
    for field, value, alt in _alternatives(cfg):
        own = describe(cfg)
        if field == "pos_encoding" and alt.positions.sentence != own.positions.sentence:
            assert alt.positions.sentence not in text, (field, value)
        if field in ("norm", "norm_kind") and alt.norm.placement_text != own.norm.placement_text:
            assert alt.norm.placement_text not in text, (field, value)
            assert f"This model is **{alt.norm.short}**" not in text, (field, value)
        if field == "activation" and alt.activation.ffn_formula != own.activation.ffn_formula:
            assert alt.activation.ffn_formula not in text, (field, value)
    CHECKS.get(page, lambda *a: None)(at, cfg, arch, text)


def check_multi_head(at, cfg, arch, text):
    shapes = at.dataframe[0].value
    rows = {step: (row["shape"], row["bias"]) for step, row in shapes.iterrows()}
    w_k = next(v for k, v in rows.items() if k.startswith(("W_K", "W_Q, W_K")))
    assert w_k[0] == f"{cfg.d_model} × {cfg.kv_heads * cfg.d_k}"  # SmolLM2: 576 × 192
    w_o = rows["W_O"]
    assert w_o[0] == f"{cfg.n_heads * cfg.d_value} × {cfg.d_model}"
    for (_, b), has in ((w_k, cfg.bias_qkv), (w_o, cfg.bias_out)):
        assert b.startswith("+ bias (") if has else b == "no bias"
    assert f"Output = {arch.output_formula}  (" in text and ("+ b_O" in arch.output_formula) == cfg.bias_out
    assert f"X is the {arch.positions.input_x}" in text
    params = next(d.value for d in at.dataframe if "parameters" in d.value.columns)  # the current model's
    for f in param_formulas(cfg):
        assert params.loc[f.part, "formula"] == f.formula and params.loc[f.part, "parameters"] == f.count


def check_layer_norm(at, cfg, arch, text):
    assert arch.norm.eps_note in text
    assert f"This model is **{arch.norm.short}**: {arch.norm.placement_text}" in text
    assert f"This model uses **{arch.norm.name}** ({arch.norm.params})" in text


def check_positional(at, cfg, arch, text):
    assert arch.positions.sentence in text
    assert ("no position vector is added" in text) == (not arch.positions.added)


def check_ffn(at, cfg, arch, text):
    assert arch.activation.ffn_formula in text and f"({arch.activation.matrices})" in text


def check_flow(at, cfg, arch, text):
    assert f"({arch.norm.short}, {cfg.n_heads} heads" in text and arch.stack_text in text
    f = next(f for f in figures(at) if "tokens, from ids" in str((f["layout"].get("title") or {}).get("text")))
    names = [a.get("text", "") for a in f["layout"].get("annotations", [])]
    dashed = [s for s in f["layout"].get("shapes", []) if (s.get("line") or {}).get("dash") == "dash"]
    has_cross_gap = any("cross-attention: none" in n for n in names)
    assert has_cross_gap == (arch.stack == "decoder-only") == (len(dashed) == 1)
    flat = " ".join(names)
    assert ("ln1_post" in flat and "ln2_post" in flat) == cfg.sandwich_norm  # Gemma 2's sandwich norms drawn
    assert ("(√d_model)" in flat) == (cfg.emb_scale is not None)
    assert ("soft-capped" in flat) == (cfg.attn_softcap is not None or cfg.final_softcap is not None)
    assert ("masked-LM head" in flat) == cfg.mlm_head
    assert f"scores {arch.score}, masked" in flat


def check_lesson(at, cfg, arch, text):
    if arch.positions.added:
        assert "token embedding plus its position vector" in text
    else:
        assert "this model adds no position vector" in text and "plus its position vector" not in text
    if cfg.norm == "pre":
        assert f"This model is **{arch.norm.short}**: attention reads {arch.norm.name}(X)" in text
    else:
        assert f"This model is **{arch.norm.short}**: attention reads X itself" in text


CHECKS = {"pages/multi-head.py": check_multi_head, "pages/layer-norm.py": check_layer_norm,
          "pages/positional.py": check_positional, "pages/ffn-output.py": check_ffn, "pages/flow.py": check_flow,
          "pages/lesson.py": check_lesson}


def test_every_family_is_a_case():
    """A family added to the engine's tiny models (tests/tiny_families.py) must be a case here."""
    pytest.importorskip("transformers")
    from tests.tiny_families import FAMILY_NAMES
    assert [c.family for c in MODEL_CASES if c.family] == list(FAMILY_NAMES)
