"""Attention Lab classroom: pure Python over model/ (worked examples, lessons, handouts and the
analyses that concept pages show). Never imports streamlit, plotly or ui/.

This file imports nothing on purpose: classroom.text (labels, markdown escaping) is also used by
viz/, which must not load torch."""
