"""One escape for every echo: text the user (or a link, or a file) supplied, repeated inside a
Markdown message (st.warning, st.error, st.caption, st.markdown ...), goes through `echo_literal`.

    st.warning(f"The link's value {echo_literal(name)}={echo_literal(raw)} is not valid here")

It cuts the text to a length (with "…"), shows control characters (line breaks included) as
visible escapes, and backslash-escapes every Markdown character (labels.md_escape): no image
(`![x](http://host/x)` would make the reader's browser fetch it), no link (`[x](javascript:...)`),
no HTML, no `$...$` math (KaTeX's \\href), no bare-URL autolink (GFM links `http://...`, `www.` and
e-mail addresses even when escaped: a word joiner breaks them), no :emoji: shortcode, no heading or
list. Streamlit renders Markdown in every message element, so no echo may skip it: the URL-value
notices (ui/state.py), model paths (ui/disk_models.py, ui/sidebar.py) and a live class's poll
answers use this one function.
"""
from __future__ import annotations

import unicodedata

from labels import md_escape

MAX_ECHO_CHARS = 80  # an echo longer than this is cut (a 5,000-character link value stays one line)


def echo_literal(text: object, max_chars: int = MAX_ECHO_CHARS) -> str:
    """`text` as literal Markdown: at most max_chars characters (then "…"), control and invisible
    characters made visible (\\n, \\x07, \\u200f), every Markdown character escaped."""
    s = str(text)
    cut = len(s) > max_chars
    s = s[:max_chars - 1] if cut else s
    out = []
    for ch in s:
        cat = unicodedata.category(ch)
        if cat in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
            out.append("\\n" if ch == "\n" else f"\\u{ord(ch):04x}" if ord(ch) > 0xFF else f"\\x{ord(ch):02x}")
        elif cat == "Zs" and ch != " ":
            out.append(" ")
        else:
            out.append(ch)
    return md_escape("".join(out) + ("…" if cut else ""))

