"""One escape for every echo: a shared link whose values are Markdown (an image that makes the
reader's browser fetch a URL, a javascript: link, KaTeX's \\href) is shown as literal text. Every
URL key of every page (the shared ones and each page's own) gets each payload; every string the
run renders as Markdown (message bodies, labels, help, options, progress text) is parsed as
Markdown and holds no image, link, HTML or math. The real-browser twin is
tests/e2e/test_e2e_echo_escape.py."""
from __future__ import annotations

import re

import pytest
from markdown_it import MarkdownIt

from tests.helpers import app_pages, app_test, errors

PAGES = app_pages()
PAYLOADS = ["![x](http://127.0.0.1:9/x)", "[x](javascript:alert(1))", "$\\href{http://127.0.0.1:9/m}{m}$"]
MARKDOWN_FIELDS = {"body", "label", "help", "text", "options", "captions"}  # rendered as Markdown by Streamlit
MARKERS = ("127.0.0.1", "javascript", "href")
MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])
MD.validateLink = lambda url: True  # count every link, javascript: ones included (a browser renderer may not drop them)


def rendered_strings(at) -> list[str]:
    """Every string of the run that Streamlit renders as Markdown (the fields above of every element)."""
    out: list[str] = []

    def walk_proto(msg) -> None:
        for field, value in msg.ListFields():
            many = isinstance(value, (list, tuple)) or (hasattr(value, "__len__") and not isinstance(value, (str, bytes))
                                                        and not hasattr(value, "ListFields"))
            values = list(value) if many else [value]
            if field.type == field.TYPE_MESSAGE:
                for v in values:
                    if hasattr(v, "ListFields"):
                        walk_proto(v)
            elif field.type == field.TYPE_STRING and field.name in MARKDOWN_FIELDS:
                out.extend(values)

    def walk(node) -> None:
        proto = getattr(node, "proto", None)
        if proto is not None and hasattr(proto, "ListFields"):
            walk_proto(proto)
        for child in getattr(node, "children", {}).values():
            walk(child)
    walk(at._tree)
    return out


def live_markdown(text: str) -> list[str]:
    """What in `text` would be live Markdown: images, links, raw HTML, bare URLs, unescaped `$`."""
    found = []
    if text.lstrip().startswith("<"):  # the app's own HTML (st.html): the user's text inside must be escaped
        return re.findall(r"<(?:img|a|script|iframe|svg|object|embed|link)\b|href=.?javascript:", text)
    for tok in MD.parse(text):
        for t in [tok, *(tok.children or [])]:
            if t.type in ("image", "link_open", "html_inline", "html_block"):
                found.append(t.type)
    if re.search(r"(?<!\\)\$", text):
        found.append("math")
    if re.search(r"(?i)https?://|\bwww\.", re.sub(r"\\(.)", r"\1", text)):  # GFM links bare URLs after unescaping
        found.append("autolink")
    return found


def test_the_checker_sees_each_payload_when_unescaped():
    for p in PAYLOADS:
        assert live_markdown(f"The link's value d={p} is not valid here"), p
    from ui.echo import echo_literal
    for p in PAYLOADS:
        assert not live_markdown(f"The link's value d={echo_literal(p)} is not valid here"), p


def page_keys(page: str) -> list[str]:
    at = app_test(default_timeout=120)
    at.switch_page(page).run()
    assert not errors(at), errors(at)
    return sorted(at.session_state["_bound_this_run"].keys())


@pytest.mark.parametrize("page", PAGES)
def test_markdown_in_every_url_value_is_shown_literally(page):
    keys = page_keys(page)
    assert "d" in keys and "src" in keys
    for shift in range(len(PAYLOADS)):
        at = app_test(default_timeout=120)
        for i, key in enumerate(keys):
            at.query_params[key] = PAYLOADS[(i + shift) % len(PAYLOADS)]
        at.switch_page(page).run()
        assert not errors(at), (page, errors(at))
        echoed = [s for s in rendered_strings(at) if any(m in s for m in MARKERS)]
        assert echoed, f"{page}: no notice repeats the link's values"
        bad = [(s[:120], live_markdown(s)) for s in echoed if live_markdown(s)]
        assert not bad, (page, shift, bad)


def text_boxes(at) -> list:
    """Every text box the run drew (text inputs and text areas, the sidebar's included)."""
    return [*at.text_input, *at.text_area]


@pytest.mark.parametrize("page", PAGES)
def test_markdown_typed_into_every_text_box_is_shown_literally(page):
    """Each page's text boxes (the sentence, a poll's nickname, a comparison's second sentence, a
    model path, ...) get the payloads (one run each, the payloads rotated over the boxes page by
    page): nothing the next run renders as Markdown holds an image, a link, HTML or math."""
    at = app_test(default_timeout=120)
    at.switch_page(page).run()
    assert not errors(at), errors(at)
    boxes = text_boxes(at)
    assert boxes, f"{page}: no text box"  # the sidebar's sentence at least
    shift = PAGES.index(page)
    for i, box in enumerate(boxes):
        box.set_value(PAYLOADS[(i + shift) % len(PAYLOADS)])
    at.run()
    assert not errors(at), (page, errors(at))
    bad = [(s[:120], live_markdown(s)) for s in rendered_strings(at) if any(m in s for m in MARKERS) and live_markdown(s)]
    assert not bad, (page, bad)
