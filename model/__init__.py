"""Attention Lab engine: pure torch. Never imports streamlit or plotly."""
from .config import PRESETS, ModelConfig, param_breakdown, param_count
from .seq2seq import Seq2SeqTransformer
from .transformer import Transformer

__all__ = ["ModelConfig", "PRESETS", "Seq2SeqTransformer", "Transformer", "param_count", "param_breakdown"]
