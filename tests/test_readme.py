"""The README and docs/ stay true: the README is short (<= 12,000 bytes); every relative link and
picture in README.md and docs/*.md resolves (files and #anchors); the README's two commands are
Makefile targets, its test command is what CI runs and it names every system package `make test`
installs; docs/features.md has one section per page in the menu's order; the pictures are the ones
docs/screenshots.py takes, each small; docs/img/architecture.svg is what docs/diagram.py writes."""
from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
README_MAX_BYTES = 12_000
PICTURE_MAX_BYTES = 200_000

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
MD_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")  # [text](target), ![alt](target)
HTML_LINK = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """Markdown without fenced code blocks and inline code (links there are not links)."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def links(text: str) -> list[str]:
    body = prose(text)
    return MD_LINK.findall(body) + HTML_LINK.findall(body)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, every character that is not a
    letter, digit, space, hyphen or underscore removed, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(md: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, title in HEADING.findall(FENCE.sub("", md.read_text(encoding="utf-8"))):
        s = slug(title)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken_links(md: Path) -> list[str]:
    """Relative links of `md` whose file (or #anchor in a Markdown file) does not exist."""
    bad = []
    for target in links(md.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        dest = (md.parent / path).resolve() if path else md
        if not dest.is_file():
            bad.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    return bad


def section(text: str, title: str) -> str:
    """The text under `## title` up to the next `## ` heading."""
    i = text.index(f"\n## {title}\n")
    j = text.find("\n## ", i + 1)
    return text[i: j if j > 0 else len(text)]


def make_targets() -> dict[str, list[str]]:
    """{target: [its prerequisites]} of the Makefile's rules."""
    rules = re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)([^\n]*)", (ROOT / "Makefile").read_text(), re.M)
    return {t: deps.split() for t, deps in rules}


def commands(block: str) -> list[str]:
    """The command lines of a shell block, comments and blank lines dropped."""
    return [ln.split("#", 1)[0].strip() for ln in block.splitlines() if ln.split("#", 1)[0].strip()]


def quick_start_commands() -> list[str]:
    text = section(README.read_text(encoding="utf-8"), "Quick start")
    return commands(re.search(r"```bash\n(.*?)```", text, re.S).group(1))


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod  # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[path.stem]
    return mod


def test_readme_is_short():
    assert README.stat().st_size <= README_MAX_BYTES, \
        f"README.md is {README.stat().st_size:,} bytes; move detail into docs/ (limit {README_MAX_BYTES:,})"


@pytest.mark.parametrize("md", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_and_picture_resolves(md):
    assert links(md.read_text(encoding="utf-8")), f"{md.name} links nowhere (is the parser reading it?)"
    assert not broken_links(md)


def test_the_link_check_sees_broken_files_and_anchors(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n## Scaling & softmax\n\n## Encoder–decoder\n\n## Encoder–decoder\n")
    md = tmp_path / "b.md"
    md.write_text("[ok](a.md#scaling--softmax) [ok](a.md#encoderdecoder-1) ![ok](a.md) [web](https://x.org/y)\n"
                  "[bad](a.md#scaling-softmax) [bad](missing.md) <img src=\"img/none.png\"> [self](#nothing)\n"
                  "`[code](not-a-link.md)`\n```\n[fenced](not-a-link-either.md)\n```\n")
    bad = broken_links(md)
    assert sorted(b.split(":")[0] for b in bad) == ["#nothing", "a.md#scaling-softmax", "img/none.png", "missing.md"]


def test_every_picture_is_used_exists_and_is_small():
    used = {(md.parent / t.partition("#")[0]).resolve() for md in [README, *DOCS]
            for t in links(md.read_text(encoding="utf-8")) if t.endswith((".png", ".svg"))}
    pictures = sorted((ROOT / "docs" / "img").glob("*.*"))
    assert pictures and all(p.suffix in (".png", ".svg") for p in pictures)
    assert not [p.name for p in pictures if p.resolve() not in used], "a picture no page shows"
    big = [(p.name, p.stat().st_size) for p in pictures if p.stat().st_size > PICTURE_MAX_BYTES]
    assert not big, f"pictures over {PICTURE_MAX_BYTES:,} bytes: {big}"
    for p in pictures:
        head = p.read_bytes()[:8]
        assert head == b"\x89PNG\r\n\x1a\n" if p.suffix == ".png" else head.startswith(b"<svg"), p.name


def test_the_screenshots_are_the_views_the_script_takes():
    shots = load(ROOT / "docs" / "screenshots.py").SHOTS
    names = [s.name for s in shots]
    assert len(names) == len(set(names)) >= 12
    on_disk = {p.stem for p in (ROOT / "docs" / "img").glob("*.png")}
    assert on_disk == set(names), "run `make screenshots` (or remove the PNG of a view no longer taken)"


def test_the_architecture_picture_is_what_the_script_writes():
    diagram = load(ROOT / "docs" / "diagram.py")
    assert diagram.OUT == ROOT / "docs" / "img" / "architecture.svg"
    assert diagram.OUT.read_text(encoding="utf-8") == diagram.svg(), "run .venv/bin/python docs/diagram.py"


def test_the_two_commands_are_makefile_targets_and_ci_runs_the_test_one():
    cmds = quick_start_commands()
    assert cmds == ["make run", "make test"]
    targets = make_targets()
    for c in cmds:
        assert c.split()[1] in targets, f"`{c}` is not a Makefile target"
    ci = commands((ROOT / ".ci" / "run").read_text())
    assert ci[-2:] == ["make test", "make test-cpus"] and cmds[1] == "make test", \
        "CI must run the README's test command, then the numeric tiers on other CPUs' kernels"
    assert "make test-cpus" in README.read_text(encoding="utf-8")
    # the recipe behind it: set-up, system packages, then pytest over every tier (no -m filter)
    assert targets["test"] == ["$(STAMP)", "system-deps"] and targets["run"] == ["$(STAMP)"]
    recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert commands(recipe) == ["$(PY) -m pytest"]


def test_every_make_command_the_docs_name_exists():
    targets = make_targets()
    for md in [README, *DOCS]:
        for t in re.findall(r"\bmake ([a-z][\w-]*)", md.read_text(encoding="utf-8")):
            assert t in targets, f"{md.name} names `make {t}`, which the Makefile does not have"


def test_the_readme_names_every_system_package_make_test_installs():
    """`make test` installs what `system-deps` depends on; the Quick start says which packages."""
    makefile = (ROOT / "Makefile").read_text()
    deps = make_targets()["system-deps"]
    assert deps, "system-deps has no prerequisites?"
    quick = section(README.read_text(encoding="utf-8"), "Quick start").lower()
    for dep in deps:
        recipe = re.search(rf"^{re.escape(dep)}:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
        pkg = re.search(r"apt-get install [^;&]*?(\S+) *>", recipe).group(1)
        assert pkg.lower() in quick, f"the README's Quick start does not say `make test` installs {pkg}"


def app_pages() -> list[tuple[str, str, str, str]]:
    """(section, file, title, url_path) of app.py's PAGES, read without running the app."""
    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "PAGES":
            return [tuple(t[:4]) for t in ast.literal_eval(node.value)]
    raise AssertionError("app.py has no PAGES")


def test_features_has_one_section_per_page_in_the_menus_order():
    text = (ROOT / "docs" / "features.md").read_text(encoding="utf-8")
    pages = app_pages()
    groups = list(dict.fromkeys(s for s, *_ in pages))
    found = []
    for group in groups:
        body = section(text, group)
        for m in re.finditer(r"^### (.+)\n\n(.*)\n", body, re.M):
            found.append((group, m.group(1), m.group(2)))
    assert [(g, t) for g, t, _ in found] == [(s, title) for s, _, title, _ in pages], \
        "docs/features.md: one '### <menu title>' per page, under its group, in app.py's PAGES order"
    for (_, title, first), (_, file, _, url) in zip(found, pages):
        assert f"`{file}`" in first and f"`/{url}`" in first.replace("`/`", f"`/{url}`"), \
            f"{title}: the section's first line gives its URL and file"
