"""The layering rules of design.md, checked by scanning imports with `ast`:
model/ never imports streamlit or plotly; viz/ never imports streamlit or torch;
pages/ never import torch directly (they go through ui/ and model/)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

RULES = {
    "model": {"streamlit", "plotly"},
    "viz": {"streamlit", "torch"},
    "pages": {"torch"},
}


def imported_top_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call):  # importlib.import_module("x") / __import__("x")
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                found.add(node.args[0].value.split(".")[0])
    return found


def test_scanner_sees_every_import_form(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import os, torch.nn as nn\nfrom plotly import graph_objects\nfrom . import sib\n"
                 "def f():\n    import streamlit as st\n    return __import__('pandas')\n"
                 "import importlib\nimportlib.import_module('numpy.linalg')\n")
    assert imported_top_modules(f) == {"os", "torch", "plotly", "streamlit", "pandas", "importlib", "numpy"}


@pytest.mark.parametrize("package", ["model", "viz"])
def test_layer_imports(package):
    files = sorted((ROOT / package).glob("**/*.py"))
    assert files, f"{package}/ has no Python files"
    bad = {str(f.relative_to(ROOT)): sorted(imported_top_modules(f) & RULES[package]) for f in files}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"{package}/ must not import {sorted(RULES[package])}: {bad}"


def test_pages_do_not_import_torch():
    files = sorted((ROOT / "pages").glob("**/*.py")) if (ROOT / "pages").is_dir() else []
    if not files:
        pytest.skip("pages/ does not exist yet")
    bad = {str(f.relative_to(ROOT)): sorted(imported_top_modules(f) & RULES["pages"]) for f in files}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"pages/ must not import torch directly (use ui/ and model/): {bad}"
