"""Stateful fuzz (issue 33): random SEQUENCES of widget changes, driven the way a browser drives
the server, with the invariants checked after every step.

Why sequences and why "the way a browser does": the one-widget-at-a-time fuzz (test_fuzz.py) never
saw the d_v crash. A browser keeps, for every option widget (selectbox, radio, multiselect,
segmented control), the LABEL it was last sent, and sends it back with every rerun; the server
maps it through the previous run's labels. AppTest instead sends the label of the current value
under the current labels, so a label that changed between runs (d_v's "= d_k (16)" after d_model
changed) never reaches the script. `Session` keeps the labels as the browser does (updated only
when the server sends a value, or when the widget first appears) and sends those.

A sequence visits pages in a seeded order (every page, `pages` of them), and on each page makes
random changes: selects, radios, multiselects, segmented controls, sliders, numbers, toggles,
checkboxes, text boxes (adversarial texts), expanders and tabs with a key, page switches and
model switches (the sidebar's Model list, over every model it offers). Widgets not touched yet
in the sequence are picked first, so a short sequence still reaches each control (after
"fresh weights", its architecture controls). Buttons are not clicked (training, example
sentences: not part of the state space here).

After every step (`check`):
  1. no exception on the page;
  2. no +-inf anywhere in a figure and NaN only in a heatmap's z (masked cells), and no "nan" /
     "inf" in the page's text, metrics or tables (except -inf where a table shows masked scores);
  3. the typed text is never lost: the sentence box and session state hold what was typed last
     (across page and model switches), and so does the URL when the text fits in a link;
     a page's own text box keeps what was typed into it while it is drawn.
Every failure names its (seed, sequence, step) and the steps that led there, so it replays.
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tests.fuzz.cases import ADVERSARIAL
from tests.helpers import app_test, figures

OPTION_TYPES = {"selectbox", "radio", "multiselect", "button_group"}  # send labels back
VALUE_TYPES = {"slider", "select_slider", "number_input", "checkbox", "toggle", "text_input", "text_area"}
# texts short enough for the CI budget; the full run also types the long ones (10,000 characters)
SHORT_TEXTS = ["empty", "spaces", "emoji", "cjk", "rtl", "control", "html_js", "markdown_latex", "one_char",
               "numbers", "normal", "normal", "normal"]


@dataclass
class Step:
    kind: str  # "option", "value", "state", "page", "model"
    target: str  # widget key (or page file)
    value: Any
    where: str = ""  # "sidebar" or "main"
    typed: bool = False  # text typed into a text box (checked afterwards: never lost)

    def describe(self) -> str:
        v = self.value
        if isinstance(v, str) and len(v) > 40:
            v = v[:40] + f"…({len(v)} chars)"
        return f"{self.kind} {self.target}={v!r}"


def _key(node) -> str:
    """A widget's user key (its id ends with "-<key>")."""
    return str(getattr(node, "key", None) or node.id.rsplit("-", 1)[-1])


def _options(node) -> list[str]:
    return [o.content if hasattr(o, "content") else str(o) for o in node.proto.options]


def _in_sidebar(at, node) -> bool:
    return any(n is node for n in _walk(at.sidebar))


def _walk(block):
    from streamlit.testing.v1.element_tree import Block
    for child in block.children.values():
        if isinstance(child, Block):
            yield from _walk(child)
        else:
            yield child


class Session:
    """An AppTest session whose option widgets send back the labels a browser holds."""

    def __init__(self, timeout: float = 120, query: dict | None = None):
        from streamlit import config
        config.set_option("client.showErrorDetails", "full")  # the failure report names the error
        self.at = app_test(default_timeout=int(timeout))
        for k, v in (query or {}).items():
            self.at.query_params[k] = v
        self.timeout = timeout
        self.held: dict[str, list[str]] = {}  # widget id -> the labels the browser holds
        self.at.run()
        self._sync()

    # ------------------------------------------------------------------ the browser's side
    def _sync(self) -> None:
        """After a run: what the browser holds now. A widget the server sent a value for takes
        it; a new widget its default; any other keeps what it held (even when its label is no
        longer an option: the browser does not know). Widgets not drawn are forgotten."""
        held = {}
        for node in self.at._tree:
            if getattr(node, "type", None) not in OPTION_TYPES or not hasattr(node, "proto"):
                continue
            p, opts = node.proto, _options(node)
            if p.set_value:
                if node.type in ("selectbox", "radio"):
                    labels = [p.raw_value] if p.HasField("raw_value") else []
                else:
                    labels = list(p.raw_values)
            elif node.id in self.held:
                labels = self.held[node.id]
            elif node.type in ("selectbox", "radio"):
                labels = [opts[p.default]] if p.HasField("default") and p.default < len(opts) else []
            else:
                labels = [opts[i] for i in p.default if i < len(opts)]
            held[node.id] = labels
        self.held = held

    def _states(self, picked: dict[str, list[str]]):
        ws = self.at._tree.get_widget_states()
        types = {n.id: n.type for n in self.at._tree if getattr(n, "type", None) in OPTION_TYPES}
        for w in ws.widgets:
            if w.id not in types:
                continue
            labels = picked.get(w.id, self.held.get(w.id))
            if labels is None:
                continue
            if types[w.id] in ("selectbox", "radio"):
                if labels:
                    w.string_value = labels[0]
                else:
                    w.ClearField("string_value")
            else:
                del w.string_array_value.data[:]
                w.string_array_value.data.extend(labels)
        return ws

    def rerun(self, picked: dict[str, list[str]] | None = None) -> None:
        """Rerun with the widget states the browser sends; `picked`: the labels just chosen."""
        states = self._states(picked or {})
        self.held.update(picked or {})  # what the user chose is what the browser holds now
        self.at._run(states, timeout=self.timeout)
        self._sync()

    # ------------------------------------------------------------------ actions
    def apply(self, step: Step) -> None:
        at = self.at
        if step.kind == "page":
            at.switch_page(step.target)
            self.rerun()
        elif step.kind in ("option", "model"):
            node = self.widget(step.target)
            self.rerun({node.id: list(step.value)})
        elif step.kind == "value":
            node = self.widget(step.target)
            if node.type in ("text_input", "text_area"):
                node.input(step.value)
            else:
                node.set_value(step.value)
            self.rerun()
        elif step.kind == "state":  # an expander or tabs with a key: the browser sends its state
            at.session_state[step.target] = step.value
            self.rerun()
        else:
            raise ValueError(step.kind)

    def widget(self, key: str):
        for node in self.at._tree:
            if hasattr(node, "id") and getattr(node, "type", None) in OPTION_TYPES | VALUE_TYPES and _key(node) == key:
                return node
        raise LookupError(f"no widget with key {key!r} on the page")


# ---------------------------------------------------------------------- choosing steps
def _value_step(node, r: random.Random, where: str, short: bool, t_cap: int | None) -> Step | None:
    key = _key(node)
    t = node.type
    if t in ("checkbox", "toggle"):
        return Step("value", key, not bool(node.value), where)
    if t in ("text_input", "text_area"):
        kind = r.choice(SHORT_TEXTS if short else list(ADVERSARIAL))
        text = ADVERSARIAL[kind](r)
        cap = node.proto.max_chars or None
        # a box in a form (the live class's "Join a class" code) is consumed by its submit: the
        # form empties it on purpose, so what was typed there is not checked afterwards
        return Step("value", key, text[:cap] if cap else text, where, typed=not node.proto.form_id)
    if t == "select_slider":
        opts = list(node.options)
        if isinstance(node.value, (list, tuple)):
            return None  # a range select slider: none in the app
        return Step("value", key, r.choice(opts), where) if len(opts) > 1 else None
    if t == "slider":
        v = node.value
        if isinstance(v, (list, tuple)) or isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        lo, hi, step = node.min, node.max, node.step or 1
        if key == "T" and t_cap:
            hi = min(hi, t_cap)
        n = int(round((hi - lo) / step))
        if n < 1:
            return None
        x = lo + step * r.randint(0, n)
        return Step("value", key, int(x) if isinstance(v, int) else float(min(x, hi)), where)
    if t == "number_input":
        v = node.value
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return None
        lo = node.min if node.min is not None else -1000
        hi = node.max if node.max is not None else 1000
        if isinstance(v, int):
            return Step("value", key, r.randint(int(math.ceil(lo)), int(math.floor(hi))), where)
        return Step("value", key, round(r.uniform(lo, hi), 3), where)
    return None


def _option_step(node, r: random.Random, where: str) -> Step | None:
    opts = _options(node)
    key = _key(node)
    if not opts:
        return None
    if node.type in ("selectbox", "radio"):
        return Step("model" if key == "src" else "option", key, [r.choice(opts)], where)
    if node.type == "button_group":
        return Step("option", key, [] if r.random() < 0.1 else [r.choice(opts)], where)
    k = r.randint(0, min(3, len(opts)))
    return Step("option", key, r.sample(opts, k), where)


@dataclass
class Plan:
    """How a sequence is drawn."""
    seed: int
    pages: list[str]
    steps_per_page: int = 3
    short_texts: bool = True  # the CI budget: short texts, max sequence length up to t_cap
    t_cap: int | None = 64
    model_every: float = 0.15  # chance that a step switches the model
    text_every: float = 0.12  # chance that a step types a new sentence in the sidebar
    sidebar_burst: int = 3  # steps in the sidebar after a model switch


@dataclass
class History:
    steps: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n      ".join(f"{i}: {s}" for i, s in enumerate(self.steps))


def candidates(s: Session) -> list[tuple[Any, str]]:
    out = []
    for node in s.at._tree:
        t = getattr(node, "type", None)
        if t not in OPTION_TYPES | VALUE_TYPES or not hasattr(node, "proto") or getattr(node.proto, "disabled", False):
            continue
        out.append((node, "sidebar" if _in_sidebar(s.at, node) else "main"))
    return out


def keyed_blocks(s: Session, r: random.Random) -> list[tuple[str, Any]]:
    """Expanders and tabs with a key (their state is a widget state): (key, a new value)."""
    from streamlit.testing.v1.element_tree import Block, Tab
    out = []
    for node in s.at._tree:
        if not isinstance(node, Block):
            continue
        try:
            key = node.key
        except Exception:
            key = None
        if not key:
            continue
        state = s.at.session_state[key] if key in s.at.session_state else None
        if node.type == "expander":
            out.append((key, not bool(state)))
        else:
            tabs = [c.label for c in node.children.values() if isinstance(c, Tab)]
            if len(tabs) > 1:
                out.append((key, r.choice(tabs)))
    return out


def next_step(s: Session, r: random.Random, plan: Plan, touched: dict[str, int], sidebar: bool = False) -> Step | None:
    """A random change: a model switch, a new sentence, or a widget (untouched ones first).
    sidebar: a change in the sidebar, not of the model (what follows a model switch)."""
    cands = candidates(s)
    by_key = {_key(n): (n, w) for n, w in cands}
    if "src" in by_key and not sidebar and r.random() < plan.model_every:
        return _option_step(by_key["src"][0], r, "sidebar")
    if "text" in by_key and r.random() < plan.text_every:
        return _value_step(by_key["text"][0], r, "sidebar", plan.short_texts, plan.t_cap)
    where = "sidebar" if sidebar or r.random() < 0.4 else "main"
    pool = [(n, w) for n, w in cands if w == where and _key(n) not in ("src", "text")]
    blocks = keyed_blocks(s, r) if where == "main" else []
    if not pool and not blocks:
        pool = [(n, w) for n, w in cands if _key(n) not in ("src", "text")]
    if blocks and (not pool or r.random() < 0.15):
        key, value = r.choice(blocks)
        return Step("state", key, value, "main")
    if not pool:
        return None
    least = min(touched.get(_key(n), 0) for n, _ in pool)
    fresh = [(n, w) for n, w in pool if touched.get(_key(n), 0) == least]
    for _ in range(8):
        node, w = r.choice(fresh)
        st = _option_step(node, r, w) if node.type in OPTION_TYPES else _value_step(node, r, w, plan.short_texts, plan.t_cap)
        if st is not None:
            return st
    return None


# ---------------------------------------------------------------------- invariants
_BAD_TEXT = re.compile(r"(?<![\w.])[-+−]?(nan|inf|infinity)(?![\w])", re.IGNORECASE)


def _finite_problems(fig: dict) -> list[str]:
    from tests.fuzz.test_fuzz import bad_numbers
    return bad_numbers(fig)


def screen_problems(at) -> list[str]:
    out = []
    if at.exception:
        e = at.exception[0].proto
        out.append(f"exception: {e.type}: {e.message[:400]} (at {' / '.join(list(e.stack_trace)[-2:])[:300]})")
    for k, fig in enumerate(figures(at)):
        out += [f"figure {k}: {p}" for p in _finite_problems(fig)]
    texts = [str(m.value) for m in (*at.markdown, *at.caption, *at.title, *at.header, *at.subheader,
                                    *at.info, *at.warning, *at.success, *at.error)]
    texts += [f"{m.label}: {m.value}" for m in at.metric]
    for t in texts:
        m = _BAD_TEXT.search(t)
        if m:
            out.append(f"text shows {m.group(0)!r}: {t[max(0, m.start() - 60):m.end() + 40]!r}")
    for d in at.dataframe:
        df = d.value
        try:
            num = df.select_dtypes(include=[np.number]).to_numpy(dtype=float)
        except Exception:
            continue
        if num.size and np.isposinf(num).any():
            out.append(f"table {d.proto.id[-30:] if hasattr(d.proto, 'id') else ''} shows +inf")
    return out


def url_text(at) -> str | None:
    """The sidebar sentence as the page's link holds it (None: not in the link = the default)."""
    from ui import state
    q = at.query_params
    get = (lambda k: (q[k][0] if isinstance(q[k], list) else q[k]) if k in q else None)
    if get("text") is not None:
        return get("text")
    if hasattr(state, "ZIPPED") and get("text" + state.ZIPPED) is not None:
        return state.unzip_text(get("text" + state.ZIPPED))
    return None


def text_problems(s: Session, typed: dict[str, str]) -> list[str]:
    from ui import state
    at, out = s.at, []
    for key, want in typed.items():
        if key == "text":
            have = at.session_state["text"] if "text" in at.session_state else None
            if have != want:
                out.append(f"the typed sentence was lost: session has {str(have)[:60]!r}, typed {want[:60]!r}")
            box = [w for w in at.sidebar.text_input if _key(w) == "text"]
            if box and box[0].value != want:
                out.append(f"the sentence box shows {str(box[0].value)[:60]!r}, typed {want[:60]!r}")
            link = url_text(at)
            fits = state.url_value(want, state.SPECS["text"]) is not None if hasattr(state, "url_value") \
                else len(want) <= state.URL_TEXT_CHARS  # (before issue 33: long texts stayed out of links)
            if want != state.DEFAULT_TEXT and fits and state._text(link or "") != state._text(want):
                out.append(f"the link's sentence is {str(link)[:60]!r}, typed {want[:60]!r}")
            continue
        drawn = [n for n in at._tree if getattr(n, "type", None) in ("text_input", "text_area") and _key(n) == key]
        if drawn and drawn[0].value != want:
            out.append(f"the text box {key!r} shows {str(drawn[0].value)[:60]!r}, typed {want[:60]!r}")
    return out


# ---------------------------------------------------------------------- a sequence
def run_sequence(plan: Plan, index: int, verbose: bool = False) -> list[str]:
    """One sequence: every page of plan.pages in a seeded order, plan.steps_per_page random
    changes on each. Returns the problems found (empty: none), each with the steps to replay it."""
    import time
    r = random.Random(plan.seed * 7919 + index)
    pages = list(plan.pages)
    r.shuffle(pages)
    s = Session()
    hist = History()
    typed: dict[str, str] = {}
    touched: dict[str, int] = {}
    problems: list[str] = []
    visits: dict[str, int] = {}  # model label -> times switched to
    for page in pages:
        queue = ["page"] + ["any"] * plan.steps_per_page
        while queue:
            slot = queue.pop(0)
            t0 = time.perf_counter()
            if slot == "page":
                st = Step("page", page, page)
            else:
                st = next_step(s, r, plan, touched, sidebar=slot == "sidebar")
                if st is None:
                    continue
            if st.kind == "model":  # every model in turn: the one visited least so far
                node = s.widget("src")
                opts = [o for o in _options(node) if o not in s.held.get(node.id, [])]
                least = min(visits.get(o, 0) for o in opts)
                pick = r.choice([o for o in opts if visits.get(o, 0) == least])
                visits[pick] = visits.get(pick, 0) + 1
                st = Step("model", "src", [pick], "sidebar")
                # then a few changes in the sidebar: its controls (with fresh weights: the
                # architecture) are what one adjusts next
                queue[:0] = ["sidebar"] * plan.sidebar_burst
            hist.steps.append(f"[{page}] {st.describe()}")
            try:
                s.apply(st)
            except Exception as exc:  # a timeout or a crash outside the script
                problems.append(f"seed {plan.seed} sequence {index} step {len(hist.steps) - 1}: "
                                f"{type(exc).__name__}: {str(exc)[:300]}\n    steps:\n      {hist}")
                return problems
            touched[st.target] = touched.get(st.target, 0) + 1
            if st.typed:
                typed[st.target] = st.value
            found = screen_problems(s.at) + text_problems(s, typed)
            if verbose:
                print(f"{time.perf_counter() - t0:6.2f}s {page:34s} {st.describe()[:90]}", flush=True)
            if found:
                problems.append(f"seed {plan.seed} sequence {index} step {len(hist.steps) - 1}: "
                                + "; ".join(found) + f"\n    steps:\n      {hist}")
                return problems  # the session is broken from here on: start the next sequence
    return problems
