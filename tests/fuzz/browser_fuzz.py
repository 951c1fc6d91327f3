"""Stateful fuzz in real Chromium (issue 33 point 2): random sequences of changes made through the
widgets themselves, so every label, every debounce and every rerun is the browser's own.

Each step finds the controls on screen (sidebar and page), picks one (controls not touched yet in
the sequence first; after a model switch, a few sidebar controls: that is what one adjusts next),
changes it to a value it does not have (so the change reruns the script), waits for that rerun
(tests/e2e/browser.py's run counter: a state, never a time) and checks the screen:
  1. no exception box;
  2. no +-inf in any drawn chart's data and NaN only in a heatmap's z (masked cells); no "NaN" or
     "inf" in the page's text;
  3. the sentence box still holds the sentence typed last.
A failure names the seed, the sequence and every step before it.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from tests.e2e.browser import IDLE_JS, exceptions, finished_runs, open_page, wait_idle

# every widget of the page and the sidebar that a user changes, with what is needed to change it
CONTROLS_JS = r"""() => {
  const out = [];
  const vis = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const label = w => ((w.querySelector('[data-testid="stWidgetLabel"]') || {}).innerText || '').trim();
  const where = w => w.closest('[data-testid="stSidebar"]') ? 'sidebar' : 'main';
  const add = (kind, w, extra) => { if (!w.closest('[data-testid="stExpanderDetails"]') || vis(w)) out.push({kind, label: label(w), where: where(w), ...extra}); };
  document.querySelectorAll('[data-testid="stSelectbox"]').forEach(w => {
    const i = w.querySelector('input'); if (i && !i.disabled) add('select', w, {value: (i.value || i.getAttribute('aria-label') || '').trim()}); });
  document.querySelectorAll('[data-testid="stMultiSelect"]').forEach(w => add('multiselect', w, {}));
  document.querySelectorAll('[data-testid="stRadio"]').forEach(w => {
    const opts = [...w.querySelectorAll('label:has(input[type=radio])')].map(l => l.innerText.trim());
    const on = [...w.querySelectorAll('input[type=radio]')].findIndex(i => i.checked);
    if (opts.length > 1 && !w.querySelector('input:disabled')) add('radio', w, {options: opts, on}); });
  document.querySelectorAll('[data-testid="stSlider"]').forEach(w => {
    const i = w.querySelector('input[type=range]'); if (i && !i.disabled)
      add('slider', w, {value: Number(i.value), min: Number(i.min), max: Number(i.max), step: Number(i.step)}); });
  document.querySelectorAll('[data-testid="stNumberInput"]').forEach(w => {
    const i = w.querySelector('input'); if (i && !i.disabled) add('number', w, {value: i.value, min: i.min, max: i.max}); });
  document.querySelectorAll('[data-testid="stCheckbox"]').forEach(w => {
    const i = w.querySelector('input'); if (i && !i.disabled) add('check', w, {on: i.checked}); });
  document.querySelectorAll('[data-testid="stTextInput"]').forEach(w => {
    const i = w.querySelector('input'); if (i && !i.disabled) add('text', w, {value: i.value, max: i.maxLength}); });
  document.querySelectorAll('[data-testid="stTextArea"]').forEach(w => {
    const i = w.querySelector('textarea'); if (i && !i.disabled) add('textarea', w, {value: i.value, max: i.maxLength}); });
  document.querySelectorAll('[data-testid="stButtonGroup"]').forEach(w => {
    const bs = [...w.querySelectorAll('button')]; if (bs.length > 1) add('segmented', w, {options: bs.map(b => b.innerText.trim())}); });
  return out.filter(c => c.label);
}"""

# finite checks on what Plotly drew: +-inf anywhere, NaN outside a heatmap's z; and the text
SCREEN_JS = r"""() => {
  const bad = [];
  const scan = (arr, path, nanOk) => {
    if (arr == null || typeof arr === 'string') return;
    if (typeof arr === 'number') { if (!Number.isFinite(arr) && !(nanOk && Number.isNaN(arr))) bad.push(path + ': ' + arr); return; }
    if (typeof arr.length === 'number') for (let i = 0; i < arr.length; i++) { scan(arr[i], path, nanOk); if (bad.length > 5) return; }
  };
  document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot').forEach((el, k) => {
    (el._fullData || []).forEach((t, j) => ['x', 'y', 'z', 'text', 'customdata'].forEach(a => {
      if (a === 'text' || a === 'customdata') return;
      scan(t[a], `chart ${k} trace ${j} (${t.type}) ${a}`, t.type === 'heatmap' && a === 'z');
    }));
  });
  const main = document.querySelector('[data-testid="stMain"]');
  const text = main ? main.innerText : '';
  const m = text.match(/(^|[\s(=:])[-+−]?(NaN|nan|inf|Infinity)(?![\w])/);
  if (m) bad.push('text shows ' + JSON.stringify(text.slice(Math.max(0, m.index - 60), m.index + 30)));
  return bad;
}"""

TEXTS = ["a dog ran to the park .", "The Cat SAT on the mat!!!", "the keys to the cabinet are on the table .",
         "<img src=x onerror=alert(1)> 🙂 the cat", "注意力机制 是 一种 方法 。", "", "   ", ".",
         "שלום עולם the cat مرحبا .", "# title $$\\frac{1}{0}$$ | a | b |", "1 2 3 -4 5e9"]


@dataclass
class BrowserPlan:
    seed: int
    pages: list[str]  # page titles as the sidebar's menu shows them
    steps_per_page: int = 2
    model_every: float = 0.2
    sidebar_burst: int = 2
    long_texts: bool = False


@dataclass
class Run:
    steps: list[str] = field(default_factory=list)
    typed: str | None = None

    def report(self, seed: int, index: int, what: str) -> str:
        return f"seed {seed} sequence {index} step {len(self.steps) - 1}: {what}\n    steps:\n      " + \
            "\n      ".join(f"{i}: {s}" for i, s in enumerate(self.steps))


def _ensure_sidebar(page) -> None:
    """Presentation mode folds the sidebar: open it again (its arrow) to reach its controls."""
    if page.locator('[data-testid="stSidebar"][data-collapsed="true"]').count():
        page.locator('[data-testid="stExpandSidebarButton"], [data-testid="stSidebarCollapsedControl"] button').first.click()
        page.wait_for_function("() => document.querySelector('[data-testid=stSidebar]').getAttribute('data-collapsed') === 'false'",
                               timeout=30_000)


def _widget(page, c: dict):
    testid = {"select": "stSelectbox", "multiselect": "stMultiSelect", "radio": "stRadio", "slider": "stSlider",
              "number": "stNumberInput", "check": "stCheckbox", "text": "stTextInput", "textarea": "stTextArea",
              "segmented": "stButtonGroup"}[c["kind"]]
    scope = page.locator('[data-testid="stSidebar"]' if c["where"] == "sidebar" else '[data-testid="stMain"]')
    return scope.locator(f'[data-testid="{testid}"]').filter(
        has=page.locator('[data-testid="stWidgetLabel"]', has_text=re.compile("^" + re.escape(c["label"]) + "$"))).first


def act(page, c: dict, r: random.Random, plan: BrowserPlan) -> str | None:
    """Change one control through the browser; returns what was done, or None (nothing to change).
    Leaves the page waiting for the rerun the change causes (the caller waits)."""
    w = _widget(page, c)
    if c["where"] == "sidebar":
        _ensure_sidebar(page)
    w.scroll_into_view_if_needed()
    kind = c["kind"]
    if kind in ("select", "multiselect"):
        w.get_by_role("combobox").click()
        opts = page.get_by_role("option")
        opts.first.wait_for(timeout=10_000)
        names = [t.strip() for t in opts.all_inner_texts()]
        names = [n for n in names if n and n != c.get("value")]
        if not names:
            page.keyboard.press("Escape")
            return None
        pick = r.choice(names)
        page.get_by_role("option", name=pick, exact=True).first.click()
        if kind == "multiselect":
            page.keyboard.press("Escape")
        return f"{c['label']} := {pick!r}"
    if kind == "radio":
        choices = [i for i in range(len(c["options"])) if i != c["on"]]
        i = r.choice(choices)
        w.locator("label:has(input[type=radio])").nth(i).click()
        return f"{c['label']} := {c['options'][i]!r}"
    if kind == "segmented":
        i = r.randrange(len(c["options"]))
        w.locator("button").nth(i).click()
        return f"{c['label']} := {c['options'][i]!r}"
    if kind == "slider":
        steps = round((c["max"] - c["min"]) / (c["step"] or 1))
        if steps < 1:
            return None
        key, n = r.choice([("ArrowRight", r.randint(1, 3)), ("ArrowLeft", r.randint(1, 3)), ("Home", 1), ("End", 1)])
        inp = w.locator("input[type=range]")
        inp.focus()
        before = inp.input_value()
        for _ in range(n):
            inp.press(key)
        if inp.input_value() == before:
            return None
        return f"{c['label']} {key} x{n} -> {inp.input_value()}"
    if kind == "number":
        lo = float(c["min"]) if c["min"] not in ("", None) else -1000
        hi = float(c["max"]) if c["max"] not in ("", None) else 1000
        v = str(r.randint(int(lo), int(hi))) if "." not in str(c["value"]) else f"{r.uniform(lo, hi):.3f}"
        if v == c["value"]:
            return None
        box = w.locator("input")
        box.fill(v)
        box.press("Enter")
        return f"{c['label']} := {v}"
    if kind == "check":
        w.locator("label:has(input)").first.click()
        return f"{c['label']} := {not c['on']}"
    if kind in ("text", "textarea"):
        text = r.choice(TEXTS + (["the bank of the river " * 120] if plan.long_texts else []))
        if c["max"] and c["max"] > 0:
            text = text[: c["max"]]
        if text == c["value"]:
            return None
        box = w.locator("textarea" if kind == "textarea" else "input")
        box.fill(text)
        box.press("Control+Enter" if kind == "textarea" else "Enter")
        return f"{c['label']} := {text[:40]!r}"
    return None


def controls(page) -> list[dict]:
    return page.evaluate(CONTROLS_JS)


def go_to(page, title: str) -> bool:
    """Click the page's link in the sidebar menu; False when it is the page shown (no rerun)."""
    _ensure_sidebar(page)
    link = page.locator('[data-testid="stSidebarNav"] a').filter(has=page.get_by_text(title, exact=True)).first
    if link.get_attribute("aria-current") == "page" or "active" in (link.get_attribute("class") or ""):
        return False
    link.scroll_into_view_if_needed()
    link.click()
    return True


def screen(page, run: Run) -> list[str]:
    out = []
    if exceptions(page):
        out.append("exception: " + page.locator('[data-testid="stException"]').first.inner_text()[:400])
    out += page.evaluate(SCREEN_JS)
    if run.typed is not None:
        box = page.get_by_role("textbox", name="Sentence", exact=True)
        if box.count() and box.input_value() != run.typed:
            out.append(f"the sentence box holds {box.input_value()[:60]!r}, typed {run.typed[:60]!r}")
    return out


def run_sequence(page, server: str, plan: BrowserPlan, index: int, timeout: float = 180_000) -> list[str]:
    """One sequence; returns the problems found (empty: none), each with the steps to replay it."""
    run = Run()
    try:
        return _sequence(page, server, plan, index, timeout, run)
    except Exception as exc:  # a wait that never came true (a rerun that never ended), a lost page
        try:
            where = page.evaluate("""() => ({url: location.href,
                state: (document.querySelector('[data-testid=stApp]') || {getAttribute: () => null}).getAttribute('data-test-script-state'),
                status: (document.querySelector('[data-testid=stStatusWidget]') || {}).innerText || null})""")
            where["runs"] = finished_runs(page)
        except Exception:  # noqa: BLE001
            where = "page gone"
        return [run.report(plan.seed, index, f"{type(exc).__name__}: {str(exc)[:300]} (page: {where})")]


def _sequence(page, server: str, plan: BrowserPlan, index: int, timeout: float, run: Run) -> list[str]:
    r = random.Random(plan.seed * 104729 + index)
    pages = list(plan.pages)
    r.shuffle(pages)
    touched: dict[tuple, int] = {}
    open_page(page, server, timeout=timeout)
    for title in pages:
        queue = ["page"] + ["any"] * plan.steps_per_page
        while queue:
            slot = queue.pop(0)
            n = finished_runs(page)
            if slot == "page":
                run.steps.append(f"page {title!r}")
                if go_to(page, title):  # False: already there (no rerun)
                    wait_idle(page, timeout, after=n)
                page.wait_for_function(f"() => !!document.querySelector('[data-testid=stMain] h1') && ({IDLE_JS})()",
                                       timeout=timeout)
            else:
                cs = controls(page)
                model = [c for c in cs if c["kind"] == "select" and c["label"] == "Model"]
                if slot == "any" and model and r.random() < plan.model_every:
                    c, slot = model[0], "model"
                else:
                    where = "sidebar" if slot == "sidebar" or r.random() < 0.4 else "main"
                    pool = [c for c in cs if c["where"] == where and c["label"] not in ("Model",)] or \
                        [c for c in cs if c["label"] != "Model"]
                    if not pool:
                        continue
                    least = min(touched.get((c["kind"], c["label"]), 0) for c in pool)
                    c = r.choice([c for c in pool if touched.get((c["kind"], c["label"]), 0) == least])
                touched[(c["kind"], c["label"])] = touched.get((c["kind"], c["label"]), 0) + 1
                try:
                    what = act(page, c, r, plan)
                except Exception as exc:  # the control went away under the click (a rerun redrew it)
                    page.keyboard.press("Escape")
                    what = None
                    run.steps.append(f"(skipped {c['kind']} {c['label']!r}: {type(exc).__name__})")
                if what is None:
                    continue
                run.steps.append(f"[{c['where']}] {what}")
                if c["kind"] == "text" and c["label"] == "Sentence":
                    run.typed = page.get_by_role("textbox", name="Sentence", exact=True).input_value()
                if slot == "model":
                    queue[:0] = ["sidebar"] * plan.sidebar_burst
                wait_idle(page, timeout, after=n)
            found = screen(page, run)
            if found:
                return [run.report(plan.seed, index, "; ".join(found))]
    return []
