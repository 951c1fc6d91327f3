"""The end-to-end flow: token ids → embeddings (+ positions) → each block → final norm → logits →
probabilities, with the current model's real tensor shapes, each stage linked to its page."""
import pandas as pd
import streamlit as st

from classroom.flow import pages_in_order, stages
from ui.models import architecture
from ui.runs import current_run
from ui.show import show_code, show_fig
from viz.flow import flow_diagram

st.title("The whole model, end to end")
show_code("model.transformer.Transformer.run", what="the forward pass, top to bottom")
run = current_run()
cfg = run.cfg
rows = stages(run.trace, cfg)
arch = architecture(run.source, cfg)
st.caption(f"Your sentence through {cfg.n_layers} block(s) of this model ({arch.norm.short}, {cfg.n_heads} heads, "
           f"d_model {cfg.d_model}): each box is one step, each arrow's label the shape of the tensor it passes on "
           "(batch axis left out). Colours: the page that explains the step (links below).")
st.markdown(arch.stack_text + (" The dashed box marks where it would sit." if arch.stack == "decoder-only" else "")
            + ("\n\n**This model's own details.** " + " ".join(arch.details) if arch.details else ""))
show_fig(flow_diagram(rows, title=f"{run.T:,} tokens, from ids to {'probabilities' if cfg.output_head else 'hidden states'}"),
         "flow_diagram", table=pd.DataFrame([{"step": r.name, "shape": " × ".join(map(str, r.shape)),
                                               "page": r.page, "what": r.what} for r in rows]),
         alt="A vertical chain of boxes from token ids to the output, each arrow labelled with a tensor shape.")
st.subheader("Each step explained")
for page, names in pages_in_order(rows).items():
    st.page_link(f"pages/{page}.py", label=f"{', '.join(names)}", icon=":material/arrow_forward:")
