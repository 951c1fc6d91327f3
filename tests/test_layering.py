"""The layering rules of design.md, checked by scanning imports with `ast`:
model/ (the engine) never imports streamlit or plotly, nor the packages built on it (classroom/,
training/, ui/, viz/); viz/ never imports streamlit or torch; classroom/ and training/ import model/
(and numpy/torch) but never streamlit, plotly, ui/ or viz/ (viz/ is plotly); classroom/ may use
training/'s corpus and batching (classroom/gradients.py trains on the corpus), so training/ never
imports classroom/: the two point one way; production code in deploy/ never imports benchmarks/
(nor training/, ui/ or the app's other layers: it starts the app as a process); pages/ never import
torch directly (they go through ui/ and classroom/). A second test imports each package in a fresh
interpreter and checks what it loaded, so an indirect import (viz/ -> labels -> torch) fails too."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROJECT = {"model", "classroom", "training", "ui", "viz", "pages", "labels", "deploy", "benchmarks", "app"}
RULES = {
    "labels": PROJECT | {"streamlit", "plotly", "torch", "numpy", "pandas"},  # the bottom: standard library only
    "model": {"streamlit", "plotly", "classroom", "training", "ui", "viz", "pages"},
    "viz": {"streamlit", "torch", "classroom", "training", "ui", "pages"},
    "classroom": {"streamlit", "plotly", "ui", "viz", "pages"},
    "training": {"streamlit", "plotly", "ui", "viz", "pages", "classroom"},
    "pages": {"torch"},
    "deploy": {"benchmarks", "training", "classroom", "ui", "viz", "pages", "model", "streamlit", "torch"},
}
# What importing every module of a package may not load, even indirectly.
LOADED_RULES = {
    "labels": {"streamlit", "plotly", "torch", "numpy", "model", "classroom", "training", "ui", "viz"},
    "model": {"streamlit", "plotly", "classroom", "training", "ui", "viz"},
    "viz": {"streamlit", "torch", "classroom", "training", "ui"},
    "classroom": {"streamlit", "plotly", "ui", "viz"},
    "training": {"streamlit", "plotly", "ui", "viz", "classroom"},
    "deploy": {"benchmarks", "training", "classroom", "ui", "viz", "model", "streamlit", "torch"},
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


def layer_violations(root: Path, package: str) -> dict[str, list[str]]:
    files = sorted((root / package).glob("**/*.py"))
    assert files, f"{package}/ has no Python files"
    bad = {str(f.relative_to(root)): sorted(imported_top_modules(f) & RULES[package]) for f in files}
    return {k: v for k, v in bad.items() if v}


@pytest.mark.parametrize("package", ["labels", "model", "viz", "classroom", "training", "deploy"])
def test_layer_imports(package):
    bad = layer_violations(ROOT, package)
    assert not bad, f"{package}/ must not import {sorted(RULES[package])}: {bad}"


def test_layer_check_catches_a_violation(tmp_path):
    """The rule check itself works: a classroom module importing ui/ is reported (and one that
    imports only model/ and numpy is not)."""
    (tmp_path / "classroom").mkdir()
    (tmp_path / "classroom" / "ok.py").write_text("import numpy as np\nfrom model.attention import attend\nfrom . import text\n")
    (tmp_path / "classroom" / "bad.py").write_text("def f():\n    from ui.runs import current_run\n    import plotly.express\n")
    assert layer_violations(tmp_path, "classroom") == {"classroom/bad.py": ["plotly", "ui"]}


@pytest.mark.parametrize("package", sorted(LOADED_RULES))
def test_importing_a_layer_loads_nothing_it_must_not(package):
    """Import every module of the package in a fresh interpreter: nothing forbidden may end up in
    sys.modules, however indirectly it was imported."""
    mods = sorted(".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                  for f in (ROOT / package).glob("**/*.py"))
    code = ("import importlib, json, sys\n"
            f"for m in {mods!r}:\n    importlib.import_module(m)\n"
            "print(json.dumps(sorted({k.split('.')[0] for k in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert not loaded & LOADED_RULES[package], f"importing {package}/ loads {sorted(loaded & LOADED_RULES[package])}"


def test_pages_do_not_import_torch():
    files = sorted((ROOT / "pages").glob("**/*.py")) if (ROOT / "pages").is_dir() else []
    if not files:
        pytest.skip("pages/ does not exist yet")
    bad = {str(f.relative_to(ROOT)): sorted(imported_top_modules(f) & RULES["pages"]) for f in files}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"pages/ must not import torch directly (use ui/ and classroom/): {bad}"


# ui/ modules that may import training/: the pages about trained models. The inference path (the
# model registry, the runs, the sidebar, every other page's helpers) never depends on training/.
UI_MAY_IMPORT_TRAINING = {
    "ui/train.py": "the Train page runs training.train in a background thread",
    "ui/encoder_decoder.py": "the shipped translators and their toy language are training/'s own artifacts",
}


def test_only_the_training_pages_ui_imports_training():
    users = {str(f.relative_to(ROOT)) for f in sorted((ROOT / "ui").glob("*.py"))
             if "training" in imported_top_modules(f)}
    assert users <= set(UI_MAY_IMPORT_TRAINING), \
        f"inference must not depend on training/: {sorted(users - set(UI_MAY_IMPORT_TRAINING))}"
    assert set(UI_MAY_IMPORT_TRAINING) <= users, "an allowance no longer needed: remove it"
