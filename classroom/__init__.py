"""Attention Lab classroom: pure Python over model/ (worked examples, lessons, handouts and the
analyses that concept pages show). Never imports streamlit, plotly or ui/."""
