"""The Docker image's contents, run without Docker (no engine on the development machine or in CI).

The Dockerfile is read, not trusted: its COPY lines are replayed into a temporary /app (with the
.dockerignore exclusions), its ENV is set, its CMD starts the server (on loopback and a free port
instead of 0.0.0.0:8501), its HEALTHCHECK command
is run, and every page is visited over Streamlit's own protocol. What this catches: a module the
app imports that the image does not copy, a page reading files outside the image, a production
config that Streamlit rejects or that misses a setting of the development config, an app that
writes into its own directory. What it cannot check: the base image and the pip step (no Docker
Hub or PyTorch index here); requirements.txt itself is what every other test installs.
"""
from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from benchmarks.soak import url_paths
from benchmarks.stclient import StClient
from deploy.server import free_port, wait_healthy

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
# Settings of the development config that the production config sets differently on purpose
# (everything else in .streamlit/config.toml must be in deploy/streamlit-prod.toml too).
PER_PROCESS = {("server", "address")}  # the container's CMD / deploy/replicas.py set it


def instructions(path: Path = ROOT / "Dockerfile") -> list[tuple[str, str]]:
    """[(INSTRUCTION, arguments)] with comments dropped and continuation lines joined."""
    out, buf = [], ""
    for line in path.read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        buf += line.rstrip()[:-1] + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            word, _, rest = buf.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            buf = ""
    return out


def one(kind: str) -> str:
    found = [a for k, a in instructions() if k == kind]
    assert len(found) == 1, f"the Dockerfile should have one {kind}, has {len(found)}"
    return found[0]


def dockerignore() -> list[str]:
    return [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")]


def ignored(rel: str, patterns: list[str]) -> bool:
    """Docker's rule for the common cases: a pattern matches the path or any of its parents;
    '**/' matches any number of directories."""
    parts = rel.split("/")
    for p in patterns:
        for i in range(1, len(parts) + 1):
            head = "/".join(parts[:i])
            if fnmatch.fnmatch(head, p) or (p.startswith("**/") and fnmatch.fnmatch(parts[i - 1], p[3:])):
                return True
    return False


def copies() -> list[tuple[str, str]]:
    out = []
    for kind, args in instructions():
        if kind == "COPY":
            words = [w for w in shlex.split(args) if not w.startswith("--")]
            out += [(src, words[-1]) for src in words[:-1]]
    return out


def env() -> dict[str, str]:
    out = {}
    for kind, args in instructions():
        if kind == "ENV":
            for word in shlex.split(args):
                k, _, v = word.partition("=")
                out[k] = v
    return out


def stage(dest: Path) -> Path:
    """Replay WORKDIR + COPY into dest (the image's root) with Docker's rules: a directory's
    contents go into the destination; a file goes into a destination ending in "/" (or ".")
    under its own name, else to that path. Returns the work directory."""
    workdir = dest / one("WORKDIR").lstrip("/")
    workdir.mkdir(parents=True)
    patterns = dockerignore()
    for src, dst in copies():
        source, target = ROOT / src, workdir / dst
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True, ignore=lambda d, names: [
                n for n in names if ignored(str((Path(d) / n).relative_to(ROOT)), patterns)])
        else:
            if dst.endswith("/") or dst == ".":
                target = target / source.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return workdir


def tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def test_every_copy_source_exists_and_reaches_the_build_context():
    patterns = dockerignore()
    assert copies(), "the Dockerfile copies nothing"
    for src, _ in copies():
        assert (ROOT / src).exists(), f"COPY {src}: no such file in the repository"
        assert not ignored(src, patterns), f"COPY {src}: excluded by .dockerignore, the build would fail"
    # what the image must not carry
    for local in ("tests", "benchmarks", ".venv", ".git"):
        assert ignored(local, patterns), f"{local} would be sent to the Docker build context"


def test_production_config_keeps_every_development_setting():
    dev = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    prod = tomllib.loads((ROOT / "deploy" / "streamlit-prod.toml").read_text())
    missing = [f"{s}.{k}" for s, opts in dev.items() for k in opts
               if (s, k) not in PER_PROCESS and k not in prod.get(s, {})]
    assert missing == [], (f"deploy/streamlit-prod.toml lacks {missing}: the image runs with that file "
                           "only, so these development settings would be lost in production")
    assert prod["client"]["showErrorDetails"] == "none" and prod["server"]["enableXsrfProtection"] is True
    # the image installs it as the app's own config
    assert ("deploy/streamlit-prod.toml", "./.streamlit/config.toml") in copies()


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """The staged image serving on loopback, started with the Dockerfile's CMD and ENV. (Not as an
    unprivileged user: this machine's Python lives under /root, which only root can enter; what
    the app writes into its directory is checked by comparing the tree before and after.)"""
    root = tmp_path_factory.mktemp("image")
    workdir = stage(root)
    home = tmp_path_factory.mktemp("home")
    port = free_port()
    cmd = json.loads(one("CMD"))
    assert cmd[:2] == ["python", "-m"] and "0.0.0.0" in cmd and "8501" in cmd, cmd
    cmd = [sys.executable] + [{"0.0.0.0": "127.0.0.1", "8501": str(port)}.get(w, w) for w in cmd[1:]]
    before = tree(workdir)
    log = open(home / "server.log", "wb")
    proc = subprocess.Popen(
        cmd, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), **env()})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout=180)
        yield dict(url=url, port=port, workdir=workdir, before=before, log=home / "server.log")
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_image_has_no_development_files(image):
    names = {Path(p).parts[0] for p in image["before"]}
    assert {"app.py", "model", "viz", "ui", "pages", "checkpoints", ".streamlit"} <= names, names
    assert not names & {"tests", "benchmarks", ".venv", ".git"}, names
    # of deploy/, only the join card's address rules (ui/live.py imports them): no server scripts or configs
    assert {p for p in image["before"] if Path(p).parts[0] == "deploy" and p != "deploy"} <= {"deploy/__init__.py", "deploy/network.py"}
    assert not [p for p in image["before"] if "__pycache__" in p or p.endswith(".pyc")]


def test_healthcheck_command_passes(image):
    args = one("HEALTHCHECK").split(" CMD ", 1)[1]
    hc = json.loads(args)
    assert hc[0] == "python" and "/_stcore/health" in hc[-1]
    code = [sys.executable] + [w.replace("8501", str(image["port"])) for w in hc[1:]]
    assert subprocess.run(code, timeout=30).returncode == 0
    # and it fails when nothing listens there (it is a real probe)
    dead = [sys.executable] + [w.replace("8501", str(free_port())) for w in hc[1:]]
    assert subprocess.run(dead, timeout=30, capture_output=True).returncode != 0


def test_every_page_runs_from_the_image_and_writes_nothing_into_it(image):
    pages = url_paths()

    async def visit() -> list[str]:
        errors = []
        async with StClient(image["url"], page="", timeout=240) as c:
            first = await c.rerun()
            if not first.ok or not first.elements.get("plotly_chart"):
                errors.append(f"the opening page: {first.exceptions[:1] or first.status}, "
                              f"{first.elements.get('plotly_chart', 0)} charts (the server log follows)")
            for p in pages:
                r = await c.goto(p)
                if not r.ok or r.not_found:
                    errors.append(f"/{p}: {r.exceptions[:1] or r.not_found or r.status}")
            await c.goto("")
            if "Sentence" in c.widgets:
                r = await c.set_widget("Sentence", "the image runs <b>as typed</b> .")
                if not r.ok or not r.elements.get("plotly_chart"):
                    errors.append(f"typing a sentence: {r.exceptions[:1] or r.status}")
            else:
                errors.append("no Sentence box")
        return errors

    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as ex:  # a fresh event loop (the browser tier keeps one in this thread)
        errors = ex.submit(asyncio.run, visit()).result()
    assert errors == [], errors + [image["log"].read_text()[-3000:]]
    assert len(pages) >= 10
    assert tree(image["workdir"]) == image["before"], "the app wrote into its own directory"
