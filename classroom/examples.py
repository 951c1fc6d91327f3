"""Sentences worth showing on the attention pages (one click away) and on the contextual page with
a real model: coreference that needs world knowledge (the Winograd-style pairs) and a word with two
senses. The toy models' 309-word vocabulary knows few of these words; MiniLM-L6 knows all of them."""
from __future__ import annotations

# (button label, sentence)
ATTENTION_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("animal … tired", "The animal didn't cross the street because it was too tired."),
    ("animal … wide", "The animal didn't cross the street because it was too wide."),
    ("trophy / suitcase", "The trophy doesn't fit into the brown suitcase because it is too large."),
    ("river bank", "I sat on the river bank."),
    ("money bank", "I deposited money at the bank."),
)

# The contextual page's default pair for a real model: "bank" in two senses (sentence A, B, word).
BANK_PAIR: tuple[str, str, str] = ("I sat on the river bank.", "I deposited money at the bank.", "bank")
