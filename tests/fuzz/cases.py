"""Generated fuzz cases: random shared settings within the widgets' ranges x adversarial texts.

Everything is derived from a seed, so a failing case is reproduced by its (seed, index):
`case(seed, i)` returns the same case on any machine.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from ui import state

# Adversarial texts. Each generator takes a Random so the long ones vary between cases.
ADVERSARIAL = {
    "empty": lambda r: "",
    "spaces": lambda r: " " * r.randint(1, 40),
    "whitespace_mix": lambda r: " \t\n\r\u00a0\u2003\u200b" * r.randint(1, 5),
    "long_10k": lambda r: " ".join(r.choice(["the", "cat", "sat", "on", "mat", ".", "keys", "table"])
                                   for _ in range(3000))[:10_000],
    "over_max_chars": lambda r: "x" * (state.MAX_TEXT_CHARS + r.randint(1, 500)),
    "emoji": lambda r: "🙂 the 🐱 sat on 👩‍👩‍👧 the mat 🇫🇷 . 🧠" * r.randint(1, 3),
    "cjk": lambda r: "注意力机制 是 一种 方法 。 トランスフォーマー 의 주의" * r.randint(1, 2),
    "rtl": lambda r: "שלום עולם the cat مرحبا بالعالم \u202eevil\u202c .",
    "control": lambda r: "the\x00cat\x01sat\x07on\x1b[31mthe\x7fmat\x08 .\r\n\x0c",
    "html_js": lambda r: r.choice(["<script>alert(1)</script>", "<img src=x onerror=alert(1)>",
                                   "\"><svg onload=alert(1)> the cat", "javascript:alert(1) `rm -rf` $x$ **b** [a](b)"]),
    "markdown_latex": lambda r: "# title $$\\frac{1}{0}$$ | a | b | :red[x] \\ ` ``` _ * ~",
    "repetitive": lambda r: ("the " * r.randint(50, 3000)).strip(),
    "one_char": lambda r: r.choice([".", "a", "é", "\u0301", "0"]),
    "numbers": lambda r: " ".join(str(r.randint(-10**9, 10**9)) for _ in range(r.randint(1, 60))),
    "normal": lambda r: r.choice(["the keys to the cabinet are on the table .",
                                  "a dog ran to the park .", "The Cat SAT on the mat!!!"]),
}

# How often each shared control takes a non-default value.
T_CHOICES = [state.T_MIN, 3, 5, 8, 16, 32, 64, 100, 128, state.T_MAX]


@dataclass
class Case:
    seed: int
    index: int
    page: str
    text_kind: str
    text: str
    settings: dict = field(default_factory=dict)  # shared controls -> value (session_state keys)
    page_widgets: int = 0  # seed for randomising the page's own widgets (0 = leave them)

    def describe(self) -> str:
        t = self.text if len(self.text) <= 60 else self.text[:60] + f"...({len(self.text)} chars)"
        return f"case(seed={self.seed}, i={self.index}) page={self.page} text[{self.text_kind}]={t!r} settings={self.settings} page_widgets={self.page_widgets}"


# The CI subset draws the model from this small pool so model-level caches are shared between
# cases (a new fresh architecture costs seconds on pages that time or train the model); the full
# run draws every architecture at random.
CI_MODELS = [dict(d=64, h=4, L=2, pe="sinusoidal", norm="pre", seed=0),
             dict(d=16, h=2, L=1, pe="learned", norm="post", seed=7)]


def case(seed: int, index: int, pages: list[str], sources: list[str], full: bool = True) -> Case:
    r = random.Random(seed * 1_000_003 + index)
    page = pages[index % len(pages)]
    kind = list(ADVERSARIAL)[(index // len(pages) + r.randrange(len(ADVERSARIAL))) % len(ADVERSARIAL)]
    text = ADVERSARIAL[kind](r)
    settings: dict = {"text": text, "mask": r.choice(["causal", "bidirectional"]),
                      "T": r.choice(T_CHOICES) if r.random() < 0.8 else r.randint(state.T_MIN, state.T_MAX)}
    settings["src"] = r.choice(sources)
    if settings["src"] == state.FRESH and not full:
        settings.update(r.choice(CI_MODELS))
    elif settings["src"] == state.FRESH:
        d = r.choice(state.D_MODELS)
        settings.update(d=d, h=r.choice(state.valid_heads(d)), L=r.randint(1, 6),
                        pe=r.choice(["sinusoidal", "learned"]), norm=r.choice(["pre", "post"]),
                        seed=r.randint(0, 9999))
    page_widgets = r.randint(1, 10**6) if r.random() < 0.6 else 0
    return Case(seed, index, page, kind, text, settings, page_widgets)
