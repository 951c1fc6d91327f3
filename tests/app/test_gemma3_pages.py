"""Gemma 3 270M in the app: every page renders with it, and the pages say what is true of it, from
its config: the heads and overview pages which layers slide (window 512) and which are global
(5, 11, 17); the multi-head page that 4 query heads share 1 K/V head of width 256 and that
4 × 256 ≠ 640; the KV-cache calculator that a local layer's cache stops at 512; the cost page that
it counts the window; the sidebar its licence (the Gemma terms, the package's copy), parameters
and size. Without the packages the module skips with the install command; a missing package
when it is picked says which command installs it."""
from __future__ import annotations

import pytest

from model.pretrained import PRETRAINED
from tests.helpers import app_pages, app_test, errors, figures

ENTRY = PRETRAINED["gemma3-270m"]
SRC = "gemma3-270m"
needs_package = pytest.mark.skipif(not ENTRY.installed(), reason=f"SKIPPED LOUDLY: {ENTRY.package} is not "
                                                                 f"installed; run {ENTRY.install}")


def start(page: str | None = None, **params):
    at = app_test(default_timeout=300)
    at.query_params["src"] = SRC
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.run()
    if page:
        at.switch_page(page).run()
    assert not errors(at), errors(at)
    assert not at.error, [e.value for e in at.error]
    return at


def text_of(at) -> str:
    return "\n".join(str(e.value) for kind in ("markdown", "caption", "info", "warning", "subheader")
                     for e in at.get(kind))


@needs_package
@pytest.mark.parametrize("page", app_pages())
def test_every_page_renders_with_gemma3(page):
    at = start(page)
    assert at.session_state["src"] == SRC
    assert figures(at) or at.dataframe or at.info or at.warning, page


@needs_package
def test_sidebar_states_licence_parameters_and_size():
    at = start()
    side = "\n".join(str(c.value) for c in at.sidebar.caption)
    assert "Licence Gemma Terms of Use (its copy in the package" in side
    assert "268.1M parameters, 253 MB of weights" in side and "google/gemma-3-270m" in side
    buttons = [b for b in at.sidebar.get("download_button") if b.proto.label == "Gemma Terms of Use"]
    assert len(buttons) == 1
    assert at.sidebar.radio(key="mask").value == "causal"


@needs_package
def test_heads_page_says_which_layers_slide():
    at = start("pages/heads.py")
    text = text_of(at)
    assert "Layer 0 is a sliding-window layer: a query sees itself and the 511 keys before it." in text
    assert "layers 0–4, 6–10, 12–16" in text and "layers 5, 11, 17 are global" in text
    at.selectbox(key="layer").set_value(5).run()
    assert "Layer 5 is global: a query sees every earlier key." in text_of(at)
    assert figures(at)[0]["layout"]["title"]["text"].startswith("Layer 5: causal attention, all 4 heads · global")


@needs_package
def test_overview_table_names_each_layers_attention():
    at = start("pages/overview.py")
    assert "layers 5, 11, 17 are global" in text_of(at)
    table = at.dataframe[0].value
    kinds = dict(zip(table["layer"], table["attention"]))
    assert kinds[0] == "sliding window 512" and kinds[5] == "global"


@needs_package
def test_multi_head_shows_one_kv_head_for_four_query_heads():
    at = start("pages/multi-head.py")
    text = text_of(at)
    assert "4 query heads sharing 1 key/value head** of width 256" in text
    assert "h × d_k = 4 × 256 = 1,024 ≠ d_model = 640" in text
    assert "K/V head 0 → query heads 0, 1, 2, 3" in text


@needs_package
def test_kv_cache_calculator_counts_the_window():
    from classroom import kv_cache

    at = start("pages/kv-cache.py")
    assert at.radio(key="kv_preset").value == "Gemma 3 270M"  # the model on screen's shape
    table = at.dataframe[0].value
    assert table.index[-1] == "this model: 3 global layers keep 2,048 tokens, 15 local layers at most w = 512"
    # 2 (K, V) × 1 K/V head × 256 × 4 bytes = 2,048 bytes per layer per token; local layers stop at 512
    assert table.iloc[-1]["bytes for the context"] == kv_cache.human_bytes(2048 * (3 * 2048 + 15 * 512))
    assert "their cache stops growing at 512" in text_of(at)


def test_gemma3_kv_shape_matches_its_config_and_counts_local_layers():
    from classroom import kv_cache
    from model.config import ModelConfig

    cfg = ModelConfig(vocab_size=8, d_model=640, n_heads=4, n_kv_heads=1, d_head=256, n_layers=18, window=512,
                      window_layers=tuple(i for i in range(18) if i not in (5, 11, 17)), pos_encoding="rope")
    shape = kv_cache.shape_of(cfg, "Gemma 3 270M")
    assert shape == kv_cache.PRESETS["Gemma 3 270M"]
    rows = kv_cache.cache_table(shape, 4096, window=512)
    assert rows[-1].context_bytes == 2048 * (3 * 4096 + 15 * 512) and rows[-1].bytes_per_token == 18 * 2048
    assert kv_cache.local_cache_bytes(shape, 4096) == (2048 * 512, 2048 * 4096)
    assert kv_cache.local_cache_bytes(shape, 100) == (2048 * 100, 2048 * 100)


@needs_package
def test_cost_page_counts_the_window():
    at = start("pages/cost.py")
    text = text_of(at)
    assert "A local layer needs at most 512 scores per query" in text


@needs_package
@pytest.mark.parametrize("page", ["pages/variants.py", "pages/mask-lab.py"])
def test_variants_and_mask_lab_show_the_real_window_beside_the_teaching_one(page):
    at = start(page)
    said = "\n".join(str(i.value) for i in at.info)
    assert "The model on screen slides too, with w = 512." in said, said
    assert "layers 5, 11, 17 are global" in said and "removes nothing" in said
    if page == "pages/variants.py":
        assert "The fresh-weights window here is w = 3" in said


def test_window_here_says_when_the_window_cuts():
    from classroom.architecture import window_here
    from model.config import ModelConfig

    cfg = ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=3, window=4, window_layers=(0, 1), pos_encoding="rope")
    assert window_here(ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1), 10) == ""
    short, long = window_here(cfg, 4), window_here(cfg, 9, 3)
    assert "At 4 tokens it removes nothing" in short and "from 5 tokens on" in short
    assert "the last query sees 4 of the 9" in long and "w = 3" in long and "layer 2 is global" in long


@needs_package
def test_gemma3_reaches_2048_tokens_and_smollm2_stays_at_1024():
    """Gemma 3's entry sets its own limit (2,048 tokens: four of its windows); the other real models
    keep the app's 1,024. A link asking 2,048 of SmolLM2 gets 1,024 and says why, truly."""
    at = start(T=2048)
    assert at.sidebar.slider(key="T").max == 2048 and at.session_state["T"] == 2048
    at.sidebar.selectbox(key="src").set_value("smollm2-135m").run()
    assert at.sidebar.slider(key="T").max == 1024 and at.session_state["T"] == 1024
    said = " ".join(i.value for i in at.sidebar.info)
    assert ("Max sequence length 2,048 is more than this model allows (the app shows this model at most "
            "1,024 tokens; it has 8,192 positions); using 1,024.") in said


@needs_package
def test_a_2048_token_input_is_traced_whole_and_the_windows_cut():
    """At 2,048 tokens the heads page traces every token (no cut-text warning) and says which layers
    slide; the local layers' weights beyond the window are exactly 0 (tests/model checks the values)."""
    from benchmarks.bench_long import LONG_TEXT
    at = start("pages/heads.py", T=2048, text=(LONG_TEXT + " ") * 3)  # 15,993 characters, ~3,160 tokens
    warnings = " ".join(w.value for w in at.warning)
    assert "the model sees the first 2,048" in warnings, warnings
    assert "That is the most the app shows (2,048 tokens; the model has 32,768 positions)." in warnings
    fig = figures(at)[0]
    assert "2,048 tokens in blocks of" in fig["layout"]["title"]["subtitle"]["text"]


@needs_package
def test_positional_page_names_both_rotary_bases_and_the_layers_own():
    at = start("pages/positional.py")
    text = text_of(at)
    assert "θ = 1,000,000 on the 3 global layers (5, 11, 17), and 10,000 on the 15 sliding-window layers" in text
    assert "Layer 0 is a sliding-window layer (window 512): its queries and keys turn with θ = 10,000." in text
    at.selectbox(key="pe_rope_layer").set_value(5).run()
    assert "Layer 5 is a global layer: its queries and keys turn with θ = 1,000,000." in text_of(at)
