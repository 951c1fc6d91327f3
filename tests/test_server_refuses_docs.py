"""The README's "What the server refuses" section lists the limits the code enforces, and pip
itself is pinned to a version with the security fixes (a venv starts with the pip its Python
ships: 23.2.1 here)."""
from __future__ import annotations

import re

from tests.helpers import ROOT

OLDEST_PIP = (25, 3)  # a current pip (the venv had 23.2.1, which predates security fixes)


def test_the_readme_lists_what_the_server_refuses():
    from model.families import disk
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"^## What the server refuses\n(.*?)^## ", readme, re.S | re.M)
    assert m, "no section 'What the server refuses'"
    section = m.group(1)
    for fact in (f"≤ {disk.MAX_LAYERS} layers", f"{disk.MAX_PATH_CHARS:,} characters", "ModelRefused",
                 "ATTENTION_LAB_MODEL_ROOTS", "ATTENTION_LAB_DISK_MODELS=all", "~/models", "echo_literal",
                 "Live class"):
        assert fact in section, fact


def test_pip_is_pinned_to_a_version_with_the_security_fixes():
    makefile = (ROOT / "Makefile").read_text()
    version = re.search(r"^PIP_VERSION := (\d+)\.(\d+)", makefile, re.M)
    assert version and tuple(map(int, version.groups())) >= OLDEST_PIP
    recipe = makefile[makefile.index("$(STAMP):"):makefile.index("run: $(STAMP)")]
    assert recipe.index("\"pip==$(PIP_VERSION)\"") < recipe.index("-r requirements-dev.txt")
    pinned = version.group(1) + "." + version.group(2)
    assert f"pip install pip=={pinned}" in (ROOT / "Dockerfile").read_text()
