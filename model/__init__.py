"""Attention Lab engine: pure torch. Never imports streamlit or plotly."""
from .config import PRESETS, ModelConfig, param_breakdown, param_count
from .memory import keep_freed_memory
from .seq2seq import Seq2SeqTransformer
from .transformer import Transformer

keep_freed_memory()  # glibc keeps a trace's freed memory for the next one (model/memory.py)

__all__ = ["ModelConfig", "PRESETS", "Seq2SeqTransformer", "Transformer", "param_count", "param_breakdown"]
