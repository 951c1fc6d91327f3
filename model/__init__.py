"""Attention Lab engine: pure torch. Never imports streamlit or plotly."""
from .config import PRESETS, ModelConfig, param_breakdown, param_count
from .transformer import Transformer

__all__ = ["ModelConfig", "PRESETS", "Transformer", "param_count", "param_breakdown"]

try:  # added by the encoder-decoder work
    from .seq2seq import Seq2SeqTransformer  # noqa: F401
    __all__.append("Seq2SeqTransformer")
except ImportError:
    pass
