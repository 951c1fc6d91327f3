"""Text helpers shared by every layer (classroom/, viz/, ui/, pages/): the "i:token" label and the
two escapes (HTML for Plotly labels, Markdown for Streamlit text). Pure standard library, below
every other package: viz/ and classroom/ both import it, and neither may import the other
(tests/test_layering.py checks that it imports nothing of the project and never pulls in torch)."""
from __future__ import annotations

import html
import re
import unicodedata
from typing import Sequence


def visible(text: str) -> str:
    """Make control and invisible characters visible (\\x07, \\u200f ...) and escape HTML.
    Plotly renders a subset of HTML in labels, so user text is always escaped."""
    out = []
    for ch in str(text):
        cat = unicodedata.category(ch)
        if cat in ("Cc", "Cf", "Zl", "Zp") or (cat == "Zs" and ch != " "):
            out.append(f"\\u{ord(ch):04x}" if ord(ch) > 0xFF else f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    s = "".join(out)
    # quotes as numeric references: Plotly decodes &#34; and &#x27; but shows "&quot;" as typed
    return html.escape(s if s else "∅", quote=True).replace("&quot;", "&#34;")


def token_labels(labels: Sequence[str], max_chars: int = 14, *, plain: bool = False, start: int = 0,
                 sep: str = ":") -> list[str]:
    """Unique labels "i:token" (a sentence may repeat a word; Plotly merges equal category labels).

    Default (figure axes): each token shortened to max_chars (with "…") and made safe by `visible`
    (HTML-escaped, invisible characters shown). plain=True (tables, CSV, widget options, text that
    is escaped later): the token exactly as given, never shortened. `start` numbers from another
    index (e.g. 1 for targets); `sep` is ": " where a label reads as prose (selectbox options)."""
    result = []
    for i, lab in enumerate(labels, start=start):
        lab = str(lab)
        if not plain:
            lab = visible(lab if len(lab) <= max_chars else lab[: max_chars - 1] + "…")
        result.append(f"{i}{sep}{lab}")
    return result


def token_label(i: int, token: str, *, plain: bool = True, sep: str = ":") -> str:
    """One "i:token" label (plain by default: for tables and text; see token_labels)."""
    return token_labels([token], plain=plain, start=i, sep=sep)[0]


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


_WORD_JOINER = "\u2060"  # invisible: the text reads as typed, a pattern is broken


def _no_autolink(s: str) -> str:
    """Break GFM's bare-URL autolinks, which Streamlit's Markdown makes from the text after its
    backslash escapes are undone (`http\\://host` is still a link): a word joiner after "://", in
    "www." and after "@" (e-mail links)."""
    s = s.replace("://", ":" + _WORD_JOINER + "//").replace("@", "@" + _WORD_JOINER)
    return re.sub(r"(?i)\bwww\.", lambda m: m.group(0)[:3] + _WORD_JOINER + ".", s)


def md_escape(text: str) -> str:
    """User text shown literally inside Markdown (st.markdown, captions, radio options): no
    emphasis, links (bracketed or bare URLs), LaTeX or :emoji: shortcodes from a token. Every
    special character gets a backslash (a backslash itself is doubled); bare URLs get a word joiner."""
    return _MD_SPECIAL.sub(r"\\\1", _no_autolink(str(text)))
