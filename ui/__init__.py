"""The only Streamlit-aware helpers: shared controls and URL state, cached compute, display."""
