"""Generate: the model writes one token at a time. Each step shows the next-token distribution, the
new token's attention over the context, the KV cache growing, and p(x) = Π p(x_t | x_<t)."""
import pandas as pd
import streamlit as st

from classroom.generate import Settings, cache_growth
from labels import md_escape, visible
from labels.units import human_bytes
from ui import generate as G
from ui import state
from ui.models import current_source
from ui.runs import tokenize
from ui.show import show_code, show_fig
from viz.charts import bar_compare
from viz.generate import cache_growth_chart, sampling_bars

st.title("Generate text, one token at a time")
show_code("model.generate.generate_step", "model.generate.next_token_probs", what="a generation step")
st.caption("A language model predicts a distribution over the next token; generation picks one, appends it, and "
           "repeats. Only the new token runs through the model at each step: the keys and values of every earlier "
           "token are kept in the KV cache.")
source = current_source()
reason = G.why_not(source)
if reason:
    st.info(f"{reason} Pick a model that writes left to right in the sidebar: causal-lm, or SmolLM2-135M · "
            "pretrained LLM.", icon=":material/info:")
    state.end_page()
cfg = G.config(source)
default_prompt = "The capital of France is" if source.real else "the cat sat on the"
state.bound("gen_prompt", default_prompt)
state.bound("gen_strategy", "greedy")
state.bound("gen_temp", 1.0)
state.bound("gen_topk", 0)
state.bound("gen_topp", 1.0)
state.bound("gen_seed", 0)
state.bound("gen_max", 16)
prompt_text = st.text_input("Prompt", key="gen_prompt", max_chars=2000,
                            help="The text the model continues. Press Enter to apply.")
c1, c2, c3, c4, c5 = st.columns([1.2, 1, 1, 1, 1])
strategy = c1.radio("Choose the next token by", ["greedy", "sample"], key="gen_strategy", horizontal=True,
                    help="greedy: always the most likely token. sample: draw from the distribution (seeded).")
sampling = strategy == "sample"
temp = c2.slider("Temperature", 0.1, 2.0, step=0.1, key="gen_temp", disabled=not sampling,
                 help="Divides the logits: < 1 sharpens the distribution, > 1 flattens it.")
top_k = c3.number_input("Top-k (0 = off)", 0, 200, step=1, key="gen_topk", disabled=not sampling)
top_p = c4.slider("Top-p (1 = off)", 0.05, 1.0, step=0.05, key="gen_topp", disabled=not sampling)
seed = c5.number_input("Seed", 0, 10_000, step=1, key="gen_seed", disabled=not sampling)
settings = Settings(strategy=strategy, temperature=float(temp), top_k=int(top_k) or None,
                    top_p=None if float(top_p) >= 1.0 else float(top_p), seed=int(seed))

state.fix("gen_max", list(range(1, 65)), 16)
max_new = st.slider("Tokens to generate", 1, 64, key="gen_max")
limit = max(1, min(cfg.max_len - max_new, 256))
if not prompt_text.strip():
    st.info("Type a prompt above: the model continues it.")
    state.end_page()
ids, _, n, _, unknown = tokenize(source, prompt_text, limit)
if n > limit:
    st.warning(f"The prompt has {n} tokens; it was cut to the first {limit} (this model reads {cfg.max_len} positions, "
               f"and {max_new} are kept free for the new tokens).")
if unknown:
    st.caption("Not in this model's vocabulary (read as the unknown token): " + ", ".join(md_escape(u) for u in unknown))
prompt = tuple(ids)

auto = st.toggle("Autoplay", key="gen_auto", help="One step about every half second until the budget is used or the "
                                                  "model ends the text. Turn off to stop at any step.")


@st.fragment(run_every=0.5 if auto else None)
def live() -> None:
    gen = G.current(source, prompt, settings)
    done = len(gen.records) >= max_new or bool(gen.records and gen.records[-1].token == G.eos_id(source))
    b1, b2, _ = st.columns([1, 1, 4])
    if b1.button("Step", key="gen_step", type="primary", disabled=done, icon=":material/skip_next:"):
        gen = G.advance(source, prompt, settings)
    if b2.button("Reset", key="gen_reset", icon=":material/restart_alt:"):
        G.reset()
        gen = G.current(source, prompt, settings)
    if auto and not done:
        gen = G.advance(source, prompt, settings)
    done = len(gen.records) >= max_new or bool(gen.records and gen.records[-1].token == G.eos_id(source))
    if auto and done:
        st.session_state["gen_auto"] = False
        st.rerun(scope="app")
    show(gen)


def show(gen) -> None:
    new = [r.token for r in gen.records]
    st.markdown(f"**Step {len(new)} of {max_new}.** Prompt ({len(gen.prompt)} tokens), then what the model wrote:")
    st.code(G.decode(source, list(gen.prompt)) + " ⟶ " + G.decode(source, new), language=None, wrap_lines=True)
    left, right = st.columns(2)
    with left:
        show_next_token(gen)
    with right:
        show_attention(gen)
    show_cache(gen)
    show_factorisation(gen)


def show_next_token(gen) -> None:
    """The model's top 10 next tokens through the sampling rule: the model's distribution, after the
    temperature, after top-k and top-p (renormalised), the kept set marked (classroom.generate)."""
    nt = gen.next_token(k=10)
    labels = G.token_texts(source, [int(i) for i in nt.top_ids])
    greedy = strategy == "greedy"
    rule = ("greedy: all on the top token" if greedy else
            f"top-k {int(top_k) or 'off'}, top-p {'off' if top_p >= 1 else f'{top_p:g}'}: kept, renormalised")
    show_fig(sampling_bars(labels, nt.p_model, None if greedy else nt.p_tempered, nt.p_rule, nt.kept_mask,
                           nt.dropped_by, temperature_name=f"÷ temperature {temp:g}", rule_name=rule,
                           chosen=0 if greedy else None,
                           title=f"Next token: the model's top 10 of {nt.vocab_size:,}, through your rule"), "gen_next",
             table=pd.DataFrame({"token": labels, "p (model)": nt.p_model,
                                 **({} if greedy else {f"p (temperature {temp:g})": nt.p_tempered}),
                                 "kept": nt.kept_mask, "dropped by": nt.dropped_by, "p (your rule)": nt.p_rule}),
             alt="Grouped bars per token: the model's probability, after the temperature, and after the top-k/top-p "
                 "cut (renormalised). A green band marks the tokens the rule keeps.")
    if greedy:
        st.caption("Greedy takes the top bar: the rule puts all the probability on it (★). Switch to *sample* to see "
                   "temperature, top-k and top-p reshape the distribution.")
    else:
        st.caption(f"Temperature {temp:g} divides the logits ({'sharper' if temp < 1 else 'flatter' if temp > 1 else 'unchanged'}); "
                   f"top-k and top-p then keep **{nt.kept:,} of {nt.vocab_size:,}** tokens (green band), which held "
                   f"{nt.kept_mass:.1%} of the tempered probability; renormalised, the top token now has "
                   f"p = {nt.p_rule[0]:.3f}. The next token is drawn from the last bars.")


def show_attention(gen) -> None:
    """Where the newest token (or the prompt's last) looks, in one layer and head."""
    att = gen.records[-1].attention if gen.records else gen.prompt_attention  # (L, H, T_ctx)
    ctx_ids = gen.ids if gen.records else list(gen.prompt)
    ctx = G.token_texts(source, ctx_ids)
    L, H = att.shape[:2]
    l1, l2 = st.columns(2)
    state.fix("gen_layer", list(range(L)), L - 1)
    state.fix("gen_head", list(range(H)), 0)
    layer = l1.selectbox("Layer", list(range(L)), key="gen_layer")
    head = l2.selectbox("Head", list(range(H)), key="gen_head")
    who = f"the new token “{ctx[-1]}”" if gen.records else f"the prompt's last token “{ctx[-1]}”"
    show_fig(bar_compare(ctx, {"weight": att[layer, head]}, yaxis="attention weight", height=300,
                         text_format=".2f" if len(ctx) <= 16 else None,
                         title=f"Where “{visible(ctx[-1])}” looks (layer {layer}, head {head})"),
             "gen_attention", table=pd.DataFrame({"token": ctx, "weight": att[layer, head]}),
             alt=f"Bar per token of the context: the attention weight {md_escape(who)} gives it.")


def show_cache(gen) -> None:
    """The KV cache: its size now, per token, and as it grew; the check that it changes nothing."""
    st.subheader("The KV cache grows by one row per layer at every step")
    growth = cache_growth(cfg, len(gen.prompt), len(gen.records))
    per = growth.bytes_per_token
    k1, k2, k3 = st.columns(3)
    k1.metric("Positions cached (rows per layer)", f"{gen.cache.length}")
    k2.metric("KV cache now", human_bytes(gen.cache.nbytes))
    k3.metric("Per token", f"{per:,} B", help=f"2 (K and V) × {cfg.n_layers} layers × {cfg.kv_heads} K/V heads × "
                                             f"{cfg.d_k} × 4 bytes")
    series = {"this model": growth.this_model}
    if cfg.kv_heads < cfg.n_heads:
        series["without grouped-query attention"] = growth.without_gqa
    if len(growth.context) > 1:
        show_fig(cache_growth_chart(growth.context, series, title="KV cache size (float32)"), "gen_cache",
                 table=pd.DataFrame({"positions": growth.context, **{f"{k} (bytes)": v for k, v in series.items()}}))
    else:  # one point (the prompt): an almost empty chart; the metrics above say it
        st.info("Generate a token: a chart of the cache growing step by step appears here.",
                icon=":material/show_chart:")
    st.caption(f"Measured: the engine's cache holds {gen.cache.nbytes:,} bytes = {gen.cache.length} positions × "
               f"{per:,} bytes per position." + (
                   f" With one K/V head per query head ({cfg.n_heads} instead of {cfg.kv_heads}) it would be "
                   f"{cfg.n_heads // cfg.kv_heads}× larger." if cfg.kv_heads < cfg.n_heads else ""))
    if st.checkbox("Check: run the whole text again without the cache", key="gen_check"):
        st.markdown(f"Largest difference between the next-token logits with and without the cache: "
                    f"**{G.uncached_gap(source, gen):.2e}** (float rounding: the cache changes the cost, not the result).")


def show_factorisation(gen) -> None:
    """p(text) = Π p(x_t | x_<t): one row per generated token."""
    st.subheader("p(text) = Π p(x_t | x_<t), token by token")
    rows = gen.factorisation()
    if not rows:
        st.info("Press Step (or Autoplay) to generate the first token.")
        return
    df = pd.DataFrame({"step": [r.step for r in rows], "token": G.token_texts(source, [r.token for r in rows]),
                       "token id": [r.token for r in rows], "p(x_t | x_<t)": [r.p for r in rows],
                       "log p": [r.logp for r in rows], "Σ log p so far": [r.logp_so_far for r in rows],
                       "p of the text so far": [r.p_so_far for r in rows]})
    st.dataframe(df.style.format({"p(x_t | x_<t)": "{:.4f}", "log p": "{:.4f}", "Σ log p so far": "{:.4f}",
                                  "p of the text so far": "{:.3e}"}), width="stretch", hide_index=True)
    st.caption("Each factor is the model's own probability (temperature 1) of the token that was chosen, given "
               "everything before it. Adding log-probabilities avoids the underflow of multiplying many small numbers: "
               f"log p(generated | prompt) = {rows[-1].logp_so_far:.4f}.")

live()
