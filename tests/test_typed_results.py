"""Analysis results are typed (design.md §1, issue 29): classroom/ returns frozen dataclasses with
shaped fields, never string-keyed dicts, and pages/ and ui/ read attributes, never `result["key"]`,
so "go to definition" from a number on screen reaches the code that computed it.

Both checks scan the source with `ast`. What may still be subscripted by a string in pages/ and ui/:
session state, query parameters and the environment (not analysis results), module constants
(ALL_CAPS tables such as PRESETS), and the few receivers listed in ALLOWED_SUBSCRIPTS with the reason
each is not an analysis result."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# classroom functions that return a dict on purpose: a mapping, not a record of named results
ALLOWED_DICT_RETURNS = {
    ("classroom/flow.py", "pages_in_order"): "{page: its stage names}: keys are data (page names), not fields",
}

# receivers that pages/ui may index by a string, each with why it is not an analysis result
ALLOWED_SUBSCRIPTS = {
    ("pages/generate.py", "series"): "the chart's input, built by the page from typed fields",
    ("ui/calculator.py", "cur"): "the calculator's editable matrices, kept in session state",
    ("ui/calculator.py", "base"): "the calculator's preset matrices, kept in session state",
    ("ui/calculator.py", "pdf"): "the data editor's frame (its 'real token' column)",
    ("ui/calculator.py", "cur['pad']"): "the padding editor's frame in session state",
    ("ui/calculator.py", "s['_calc_cur']"): "session state",
    ("ui/calculator.py", "s['_calc_base']"): "session state",
    ("ui/encoder_decoder.py", "record"): "the checkpoint's config.json record, read into typed scores here",
    ("ui/encoder_decoder.py", "al"): "the checkpoint's config.json record, read into typed scores here",
    ("ui/runs.py", "f.f_globals"): "a page script's namespace (release_pages swaps its runs for trace-less ones)",
    ("ui/models.py", "meta"): "a checkpoint's config.json",
    ("ui/models.py", "meta.get('extra') or {}"): "a checkpoint's config.json",
    ("ui/models.py", "metas[DEFAULT_SOURCE]"): "a checkpoint's config.json",
    ("ui/positional.py", "meta"): "a checkpoint's config.json",
    ("ui/positional.py", "meta.get('config') or {}"): "a checkpoint's config.json",
    ("ui/runs.py", "extras"): "the named arrays of an .npz export",
    ("ui/runtime.py", "pio.templates"): "Plotly's template registry",
    ("ui/__init__.py", "info"): "Streamlit's page registry",
    ("ui/live.py", "params"): "the query parameters a follower takes from the lecturer's view",
    ("ui/client.py", "headers"): "the request's HTTP headers (st.context.headers: X-Forwarded-For)",
}


def _str_keyed_returns(fn: ast.FunctionDef) -> bool:
    ann = ast.unparse(fn.returns) if fn.returns else ""
    if ann == "dict" or ann.startswith(("dict[str", "list[dict", "tuple[dict")):
        return True
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and node.value is not None:
            v = node.value
            if isinstance(v, ast.Dict) and any(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in v.keys):
                return True
            if isinstance(v, ast.Call) and ast.unparse(v.func) == "dict" and v.keywords:
                return True
    return False


def dict_returns(root: Path) -> list[tuple[str, str]]:
    """(file, function) of every public classroom function (or method) that returns a string-keyed dict."""
    found = []
    for f in sorted((root / "classroom").glob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        fns = []
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                fns.append(node)
            elif isinstance(node, ast.ClassDef):
                fns += [n for n in node.body if isinstance(n, ast.FunctionDef)]
        rel = str(f.relative_to(root))
        found += [(rel, fn.name) for fn in fns if not fn.name.startswith("_") and _str_keyed_returns(fn)]
    return found


def _state_aliases(tree: ast.AST) -> set[str]:
    """Names bound to st.session_state or st.query_params in this file (`s = st.session_state`)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and ast.unparse(node.value).endswith(("session_state", "query_params")):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def string_subscripts(root: Path) -> list[tuple[str, int, str]]:
    """(file, line, receiver) of every `x["key"]` / `x.get("key")` in pages/ and ui/ whose receiver is
    not session state, query parameters, the environment, a constant table or an allowed receiver."""
    found = []
    for f in sorted([*(root / "pages").glob("*.py"), *(root / "ui").glob("*.py")]):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        rel, state = str(f.relative_to(root)), _state_aliases(tree)
        for node in ast.walk(tree):
            recv = None
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                    and isinstance(node.slice.value, str):
                recv = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("get", "pop", "setdefault") and node.args \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                recv = node.func.value
            if recv is None:
                continue
            r = ast.unparse(recv)
            last = r.split(".")[-1]
            if any(w in r for w in ("session_state", "query_params", "environ")) or r in state \
                    or (last.isupper() and last.isidentifier()) or (rel, r) in ALLOWED_SUBSCRIPTS:
                continue
            found.append((rel, node.lineno, r))
    return found


def test_classroom_returns_no_string_keyed_dicts():
    bad = [x for x in dict_returns(ROOT) if x not in ALLOWED_DICT_RETURNS]
    assert not bad, f"return a frozen dataclass with shaped fields instead of a dict: {bad}"


def test_pages_and_ui_read_results_by_attribute():
    bad = string_subscripts(ROOT)
    assert not bad, ("read analysis results by attribute (or, if this is not an analysis result, add the "
                     f"receiver to ALLOWED_SUBSCRIPTS with the reason): {bad}")


@pytest.mark.parametrize("allowed", [ALLOWED_DICT_RETURNS, ALLOWED_SUBSCRIPTS])
def test_every_allowance_is_still_needed(allowed):
    """An allowance whose code is gone must go too (the lists never grow stale)."""
    if allowed is ALLOWED_DICT_RETURNS:
        present = set(dict_returns(ROOT))
    else:
        saved = dict(ALLOWED_SUBSCRIPTS)
        ALLOWED_SUBSCRIPTS.clear()
        try:
            present = {(f, r) for f, _, r in string_subscripts(ROOT)}
        finally:
            ALLOWED_SUBSCRIPTS.update(saved)
    assert set(allowed) <= present, f"no longer needed: {sorted(set(allowed) - present)}"


def test_the_checks_catch_a_dict_result_and_a_subscript(tmp_path):
    (tmp_path / "classroom").mkdir()
    (tmp_path / "pages").mkdir()
    (tmp_path / "ui").mkdir()
    (tmp_path / "classroom" / "x.py").write_text(
        "def bad(a) -> dict:\n    return {'w': a}\n\ndef also_bad(a):\n    return dict(w=a)\n\n"
        "def fine(a) -> list[int]:\n    return [a]\n\ndef _private(a):\n    return {'w': a}\n")
    (tmp_path / "pages" / "p.py").write_text(
        "import streamlit as st\ns = st.session_state\nr = f()\nx = r['weights']\ny = r.get('t')\n"
        "z = s['text'] + st.session_state.get('mask') + PRESETS['gpt2']\n")
    (tmp_path / "ui" / "u.py").write_text("def g(res):\n    return res.weights\n")
    assert dict_returns(tmp_path) == [("classroom/x.py", "bad"), ("classroom/x.py", "also_bad")]
    assert string_subscripts(tmp_path) == [("pages/p.py", 4, "r"), ("pages/p.py", 5, "r")]
