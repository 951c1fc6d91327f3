"""Attention Lab training: pure Python over model/ (corpora, batching, the training loop and its
command line `python -m training.train`, the toy translator). Never imports streamlit, plotly or ui/."""
