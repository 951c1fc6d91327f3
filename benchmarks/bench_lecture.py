"""The slow steps of a lecture (issue 33) in Chromium, one session clicking as a lecturer does:
first and second visits of Scaling & softmax and Tiled attention (sidebar links), four Generate
steps on SmolLM2, an ablation click and "Rank every head" on SmolLM2. Prints one line per step
with the load average at its start (the numbers in docs/benchmarks.md, "Lecture steps").

    .venv/bin/python -m benchmarks.bench_lecture [visits] [generate] [ablate] [importance]
"""
import os, sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))
from playwright.sync_api import sync_playwright
from tests.e2e.browser import ARGS, CHROMIUM, serving, wait_idle, open_page

DRAWN = """titles => { const els = Array.from(document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot'));
  const t = els.filter(e => e._fullLayout).map(e => { const x = e._fullLayout.title; return String((x && x.text) || '').replace(/<[^>]+>/g, ''); });
  return titles.every(s => t.some(x => x.startsWith(s))); }"""

def time_step(label, action, page, titles=(), text=None, rows=None):
    l0 = os.getloadavg()[0]
    t0 = time.perf_counter(); action()
    if titles:
        page.wait_for_function(DRAWN, arg=list(titles), timeout=900_000)
    if text:
        page.wait_for_function(f"() => document.body.innerText.includes({text!r})", timeout=900_000)
    t = time.perf_counter() - t0
    print(f"{label}: {t:.2f} s (load {l0:.1f})", flush=True)
    if rows is not None:
        rows.append(dict(benchmark=f"lecture step: {label.strip()}", metric=f"wall s in Chromium (load {l0:.1f})",
                         app=round(t, 3), bare=None, ratio=None, target="informational", ok=None))
    wait_idle(page, timeout=900_000)
    return t

STEPS = ("visits", "generate", "ablate", "importance")


def lecture(which=STEPS) -> list[dict]:
    """Replay the steps in Chromium; one row per timed step (benchmarks/run_all's format)."""
    rows = []

    def timed(*a, **k):  # every step's time also kept as a row
        return time_step(*a, rows=rows, **k)

    with serving() as url, sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = b.new_context(viewport={"width": 1400, "height": 900}).new_page()
        open_page(page, url)  # the home page (heads): imports, the default model, plotly.js
        if "visits" in which:
            for n in ("first", "second"):
                timed(f"{n} visit Scaling & softmax (sidebar link)", lambda: page.get_by_role("link", name="Scaling & softmax").click(),
                      page, titles=["Scores: raw vs scaled", "Softmax weights", "Variance of q·k", "Mean softmax entropy"])
                timed(f"{n} visit Tiled attention, first paint (sidebar link)", lambda: page.get_by_role("link", name="Tiled attention (FlashAttention)").click(),
                      page, titles=["Step 1/"])
                timed(f"    ... until its memory chart", lambda: None, page, titles=["Peak memory"])
        if "generate" in which:
            open_page(page, url, "generate", "src=smollm2-135m")
            for i in range(4):
                timed(f"generate step {i+1} (SmolLM2)", lambda: page.get_by_role("button", name="Step").click(), page,
                      text=f"Step {i + 1} of")
        if "ablate" in which:
            open_page(page, url, "intervene", "src=smollm2-135m")
            def pick(name):
                inp = page.locator('[data-testid="stMultiSelect"] input').first
                inp.click(); inp.fill(name); page.keyboard.press("Enter"); page.keyboard.press("Escape")
            timed("ablation click L3 H1 (SmolLM2)", lambda: pick("L3 H1"), page, text="switching off L3 H1")
        if "importance" in which:
            open_page(page, url, "intervene", "src=smollm2-135m")
            timed("rank every head (SmolLM2, default sentence)", lambda: page.get_by_text("Rank every head").click(), page, text="Top 10")
        b.close()
    return rows


def run(quick: bool = False) -> list[dict]:
    """benchmarks/run_all: the first and second visits only when quick, every step otherwise."""
    return lecture(("visits",) if quick else STEPS)


if __name__ == "__main__":
    lecture(tuple(sys.argv[1:]) or STEPS)
