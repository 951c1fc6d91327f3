"""Pure drawing: numpy/pandas + token labels in, plotly Figures out. Never imports streamlit or torch."""
