"""Fuzz tier: every page through generated cases (random shared settings within the widgets'
ranges, random values for the page's own widgets, adversarial texts), with AppTest.

For every case it asserts:
  1. no exception element and no uncaught error;
  2. figure data is finite where it must be: no +-inf anywhere in any figure, and NaN only in a
     heatmap's `z` (design rule: masked cells are NaN in the figure so they are drawn blank/grey).
     `null` entries inside plain JSON lists are Plotly's gap markers (e.g. line segments separated
     by None) and are not NaN values; they are allowed. Typed arrays (base64) are decoded;
  3. a visible message wherever the input was changed: text over MAX_TEXT_CHARS -> a warning that
     mentions characters; more tokens than the max sequence length -> a warning that mentions
     tokens; empty/whitespace-only text -> an info or warning message. These apply to the pages
     that show the sidebar sentence, listed in SENTENCE_PAGES; a probe at the start of each page
     (`uses_sentence`: do its charts/tables change with the sentence?) must agree with that list.

CI (`make test`) runs a fixed-seed subset (FUZZ_CASES_PER_PAGE, default 4 per page, two model
architectures, < 2 min);
`make fuzz` (FUZZ_FULL=1) runs >= 500 cases. FUZZ_SEED picks another seed. One AppTest is reused
per page (a run is ~0.05-0.7 s; a fresh AppTest costs ~1 s plus imports) and replaced after a
failing case so one failure does not cascade.
"""
from __future__ import annotations

import json
import math
import os
import random
import re
import time

import numpy as np
import pytest

from tests.fuzz.cases import ADVERSARIAL, Case, case
from tests.helpers import app_pages, app_test, decode, errors, figures

pytestmark = pytest.mark.fuzz

FULL = os.environ.get("FUZZ_FULL") == "1"
SEED = int(os.environ.get("FUZZ_SEED", "20240607"))
VERBOSE = os.environ.get("FUZZ_VERBOSE") == "1"
FULL_TOTAL = int(os.environ.get("FUZZ_TOTAL", "520"))


PAGES = app_pages()
PER_PAGE = math.ceil(FULL_TOTAL / max(1, len(PAGES))) if FULL else int(os.environ.get("FUZZ_CASES_PER_PAGE", "4"))


def model_sources() -> list[str]:
    from ui import models, state
    out = [state.FRESH]
    if (models.CHECKPOINTS / models.DEFAULT_SOURCE / "model.safetensors").is_file():
        out.append(models.DEFAULT_SOURCE)
    return out


# ---------------------------------------------------------------- figure data checks
def _arrays(node, path=""):
    """Yield (path, float ndarray) for every numeric array or number inside a figure dict."""
    if isinstance(node, dict):
        if "bdata" in node and "dtype" in node:
            yield path, np.asarray(decode(node), dtype=float)
            return
        for k, v in node.items():
            yield from _arrays(v, f"{path}.{k}" if path else k)
    elif isinstance(node, list):
        flat = _flatten(node)
        nums = [x for x in flat if isinstance(x, (int, float)) and not isinstance(x, bool)]
        if nums:
            yield path, np.asarray(nums, dtype=float)
        for i, x in enumerate(node):
            if isinstance(x, dict):
                yield from _arrays(x, f"{path}[{i}]")
    elif isinstance(node, float):
        yield path, np.asarray([node])


def _flatten(x):
    if isinstance(x, list):
        for y in x:
            yield from _flatten(y)
    else:
        yield x


def bad_numbers(fig: dict) -> list[str]:
    """Problems in one figure: inf anywhere; NaN anywhere but a heatmap's z."""
    out = []
    for i, tr in enumerate(fig.get("data", [])):
        ttype = tr.get("type", "scatter")
        for path, arr in _arrays(tr):
            if np.isinf(arr).any():
                out.append(f"trace {i} ({ttype}) {path}: {int(np.isinf(arr).sum())} inf")
            if np.isnan(arr).any() and not (ttype == "heatmap" and path == "z"):
                out.append(f"trace {i} ({ttype}) {path}: {int(np.isnan(arr).sum())} NaN")
    for path, arr in _arrays(fig.get("layout", {})):
        if not np.isfinite(arr).all():
            out.append(f"layout.{path}: non-finite")
    return out


def test_bad_numbers_catches_what_it_should():
    """The checker itself: inf anywhere and NaN outside heatmap z are found; masked NaN is not."""
    import base64
    z = np.array([[0.5, np.nan], [0.2, 0.8]])
    typed = {"dtype": "f8", "bdata": base64.b64encode(z.tobytes()).decode(), "shape": "2, 2"}
    assert bad_numbers({"data": [{"type": "heatmap", "z": typed}]}) == []
    assert bad_numbers({"data": [{"type": "scatter", "y": typed}]})  # NaN outside z
    inf = {"dtype": "f4", "bdata": base64.b64encode(np.array([1, np.inf], "f4").tobytes()).decode()}
    assert bad_numbers({"data": [{"type": "heatmap", "z": inf}]})
    assert bad_numbers({"data": [{"type": "bar", "x": [1.0, float("inf")]}]})
    assert bad_numbers({"data": [{"type": "scatter", "x": [0, 1, None, 2]}]}) == []  # gaps are fine
    assert bad_numbers(json.loads('{"data": [{"type": "scatter", "y": [1, NaN]}]}'))


# ---------------------------------------------------------------- page widgets
def randomise_page_widgets(at, seed: int) -> None:
    """Random in-range values for the page's own widgets (main area; buttons never clicked)."""
    r = random.Random(seed)
    main = at.main
    for w in [*main.selectbox, *main.radio]:
        if w.options and r.random() < 0.5 and not w.disabled:
            _select_option(w, w.options[r.randrange(len(w.options))])
    for w in main.slider:
        if r.random() < 0.5 and isinstance(w.value, (int, float)) and not isinstance(w.value, bool) \
                and not w.disabled:  # a browser user cannot move a disabled widget
            lo, hi, step = w.min, w.max, w.step or 1
            n = int(round((hi - lo) / step))
            v = lo + step * r.randint(0, max(n, 0))
            _try(lambda: w.set_value(int(v) if isinstance(w.value, int) else float(min(v, hi))))
    for w in main.number_input:
        if r.random() < 0.5 and isinstance(w.value, (int, float)) and not w.disabled:
            lo = w.min if w.min is not None else -1000
            hi = w.max if w.max is not None else 1000
            v = r.uniform(lo, hi)
            _try(lambda: w.set_value(int(round(v)) if isinstance(w.value, int) else v))
    for w in [*main.checkbox, *main.toggle]:
        if r.random() < 0.5 and not w.disabled:
            w.set_value(r.random() < 0.5)
    for w in [*main.text_area, *main.text_input]:
        if r.random() < 0.3:
            kind = r.choice(list(ADVERSARIAL))
            w.input(ADVERSARIAL[kind](r)[: (w.proto.max_chars or 10**9)])


def _select_option(w, option: str) -> None:
    """Select a shown option. AppTest's select_index stores the shown text as the value, which
    breaks widgets with a format_func ("head 2" -> "head head 2"); find the value that formats to
    the option instead (the option text itself, a number, or a small int)."""
    candidates: list = [option]
    try:
        candidates += [int(option), float(option)]
    except ValueError:
        pass
    candidates += list(range(0, 512))
    for c in candidates:
        try:
            if str(w.format_func(c)) == option:
                w.set_value(c)
                return
        except Exception:
            continue


def _try(fn) -> None:
    try:
        fn()
    except (ValueError, TypeError, IndexError, KeyError):
        pass  # a widget whose values AppTest cannot set from its shown options


# ---------------------------------------------------------------- expectations
_TOKENIZERS: dict = {}


def expected_notices(c: Case) -> dict[str, bool]:
    """What a page showing the sidebar sentence must say for this case."""
    from ui import models, state
    src = c.settings.get("src", state.FRESH)
    if src not in _TOKENIZERS:
        if src == state.FRESH:
            _TOKENIZERS[src] = (models.fresh_tokenizer(), state.T_MAX)
        else:
            model, tok = models.get_model(models.ModelSource("checkpoint", src))
            _TOKENIZERS[src] = (tok, model.cfg.max_len)
    tok, model_max = _TOKENIZERS[src]
    text = c.text
    cut = len(text) > state.MAX_TEXT_CHARS
    n = len(tok.encode(text[: state.MAX_TEXT_CHARS]).ids) if text.strip() else 0
    limit = min(int(c.settings.get("T", 64)), model_max)
    return {"empty": not text.strip(), "text_cut": cut and bool(text.strip()), "truncated": n > limit}


def messages(at) -> dict[str, list[str]]:
    return {"warning": [str(w.value) for w in at.warning], "info": [str(i.value) for i in at.info],
            "error": [str(e.value) for e in at.error]}


def check_case(at, c: Case, uses_sentence: bool) -> list[str]:
    problems = []
    errs = errors(at)
    if errs:
        problems.append(f"exception: {errs[0][:300]}")
    for k, fig in enumerate(figures(at)):
        for p in bad_numbers(fig):
            problems.append(f"figure {k}: {p}")
    if uses_sentence and not errs:
        exp, msg = expected_notices(c), messages(at)
        warn = " ".join(msg["warning"]).lower()
        if exp["empty"] and not (msg["info"] or msg["warning"]):
            problems.append("empty text but no info/warning message")
        if exp["text_cut"] and "character" not in warn:
            problems.append(f"text of {len(c.text)} chars was cut without a warning mentioning characters: {msg['warning']}")
        if exp["truncated"] and not exp["empty"] and "token" not in warn:
            problems.append(f"text truncated to max length without a warning mentioning tokens: {msg['warning']}")
    return problems


# ---------------------------------------------------------------- the runs
def fresh_app(page: str):
    at = app_test(default_timeout=120)
    at.run()
    at.switch_page(page).run()
    return at


def apply(at, c: Case) -> None:
    """Set the case's shared settings (and maybe random page-widget values), then run."""
    # Model source and d_model first: the Heads options depend on them, and AppTest serialises the
    # previous run's widgets (a head count not offered yet would not be one of their options).
    first = {k: v for k, v in c.settings.items() if k in ("src", "d")}
    if any(at.session_state[k] != v if k in at.session_state else True for k, v in first.items()):
        for k, v in first.items():
            at.session_state[k] = v
        at.run()
    for k, v in c.settings.items():
        at.session_state[k] = v
    if c.page_widgets:
        randomise_page_widgets(at, c.page_widgets)
    at.run()


def figure_fingerprint(at) -> str:
    """The page's charts, tables and text (a lesson step shows the sentence's numbers in its
    questions before its table; the table waits for the answer)."""
    tables = [d.value.to_json() for d in at.dataframe] + [t.value.to_json() for t in at.table]
    text = [m.value for m in at.main.markdown]
    return json.dumps([[f.get("data") for f in figures(at)], tables, text], sort_keys=True)


def uses_sentence(at) -> bool:
    """Does this page show the sidebar sentence? Its charts/tables change when the sentence does."""
    at.session_state["text"] = "the keys to the cabinet are on the table ."
    at.run()
    a = figure_fingerprint(at)
    at.session_state["text"] = "a dog ran to the park and the cat sat on the mat ."
    at.run()
    return figure_fingerprint(at) != a


# The pages that show the sidebar sentence, so must warn when they cut it (check 3). Written out:
# the probe above must agree, so a page can no longer switch its warning checks off silently.
# The others draw their own inputs (mask lab, contextual, encoder-decoder: their own sentences;
# cost, calculator: numbers; train: its corpus).
SENTENCE_PAGES = {"pages/heads.py", "pages/overview.py", "pages/causal-vs-bidirectional.py",
                  "pages/scaling.py", "pages/positional.py", "pages/layer-norm.py",
                  "pages/multi-head.py", "pages/ffn-output.py", "pages/lesson.py", "pages/flash.py", "pages/model-view.py", "pages/intervene.py", "pages/flow.py",
                  "pages/variants.py", "pages/circuits.py"}


def ci_cases(page: str) -> list[Case]:
    """The cases test_fuzz_page runs for this page (the CI subset unless FUZZ_FULL=1)."""
    idx = PAGES.index(page)
    return [case(SEED, idx + k * len(PAGES), PAGES, model_sources(), full=FULL) for k in range(PER_PAGE)]


@pytest.mark.parametrize("page", PAGES)
def test_fuzz_page(page: str) -> None:
    cases = ci_cases(page)
    at = fresh_app(page)
    assert not errors(at), f"{page} fails at the defaults: {errors(at)}"
    sentence = page in SENTENCE_PAGES
    assert uses_sentence(at) == sentence, (
        f"{page}: the probe says it {'does' if not sentence else 'does not'} show the sidebar sentence; "
        "update SENTENCE_PAGES (its warning checks depend on it)")
    failures = []
    for c in cases:
        t0 = time.perf_counter()
        try:
            try:
                apply(at, c)
            except ValueError:
                # AppTest could not serialise a stale page widget (its old options no longer hold
                # the value in session_state): a harness limit, not an app bug. Start clean.
                at = fresh_app(page)
                apply(at, Case(c.seed, c.index, c.page, c.text_kind, c.text, c.settings, 0))
            problems = check_case(at, c, sentence)
        except Exception as exc:  # AppTest timeout or a crash outside the script
            problems = [f"{type(exc).__name__}: {str(exc)[:300]}"]
        if VERBOSE:
            print(f"{time.perf_counter() - t0:6.2f}s {c.describe()[:160]}")
        if problems:
            failures.append(f"{c.describe()}\n    " + "\n    ".join(problems))
            at = fresh_app(page)  # do not let one failure cascade
    assert not failures, f"{len(failures)}/{len(cases)} cases failed on {page}:\n" + "\n".join(failures)


def test_sentence_pages_are_known_pages():
    assert SENTENCE_PAGES <= set(PAGES) and len(SENTENCE_PAGES) >= 9


def test_ci_subset_exercises_every_notice_on_sentence_pages():
    """Cheap (no app run): the cases the default run draws for the sentence pages include text that
    must raise each notice (empty, cut at MAX_TEXT_CHARS, truncated to the max length), both model
    sources and both masks; so check 3 runs in CI, not only under FUZZ_FULL."""
    cases = [c for p in sorted(SENTENCE_PAGES) for c in ci_cases(p)]
    assert len(cases) == PER_PAGE * len(SENTENCE_PAGES)
    notices = [expected_notices(c) for c in cases]
    for kind in ("empty", "text_cut", "truncated"):
        assert sum(n[kind] for n in notices) >= 1, f"no case on a sentence page must show the {kind!r} notice"
    assert {c.settings["src"] for c in cases} == set(model_sources())
    assert {c.settings["mask"] for c in cases} == {"causal", "bidirectional"}
    kinds = {c.text_kind for p in PAGES for c in ci_cases(p)}
    assert len(kinds) >= (len(ADVERSARIAL) if FULL else 10), sorted(set(ADVERSARIAL) - kinds)


def test_case_generation_is_deterministic_and_covers_every_kind():
    a = [case(SEED, i, PAGES, ["x", "y"]) for i in range(60)]
    b = [case(SEED, i, PAGES, ["x", "y"]) for i in range(60)]
    assert [c.describe() for c in a] == [c.describe() for c in b]
    if FULL:
        kinds = {case(SEED, i, PAGES, ["x"]).text_kind for i in range(PER_PAGE * len(PAGES))}
        assert kinds == set(ADVERSARIAL)
    assert re.search(r"page=pages/", a[0].describe())
