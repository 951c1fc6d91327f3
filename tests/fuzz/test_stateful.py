"""Stateful fuzz tier (issue 33 point 2), AppTest: random sequences of widget changes over every
page and every model, driven as a browser drives the server (tests/fuzz/stateful.py). After every
step: no exception, no inf/NaN on screen, the typed text never lost.

CI (`make test`) runs FUZZ_SEQUENCES fixed-seed sequences (default 2), each visiting every page
with FUZZ_STEPS changes on each (default 2) plus a few sidebar changes after each model switch;
short texts and max sequence length <= 64 (the budget: about two minutes here on 2 cores).
`make fuzz` (FUZZ_FULL=1) runs FUZZ_SEQUENCES=12 sequences of 5 changes per page, every text
kind (10,000 characters included) and any max sequence length. FUZZ_SEED picks another seed; a
failure prints the seed, the sequence, the step and every step before it, so it replays.
On today's main before issue 33 the CI subset fails on the d_v crash (fresh weights -> d_model ->
any change); test_replays_the_d_v_crash_sequence replays that sequence alone.
"""
from __future__ import annotations

import os

import pytest

from tests.fuzz.stateful import Plan, Session, Step, run_sequence
from tests.helpers import app_pages, errors
from ui import state

pytestmark = pytest.mark.fuzz

FULL = os.environ.get("FUZZ_FULL") == "1"
SEED = int(os.environ.get("FUZZ_SEED", "33"))
SEQUENCES = int(os.environ.get("FUZZ_SEQUENCES", "12" if FULL else "2"))
STEPS = int(os.environ.get("FUZZ_STEPS", "5" if FULL else "2"))
VERBOSE = os.environ.get("FUZZ_VERBOSE") == "1"
PAGES = app_pages()


def plan() -> Plan:
    return Plan(SEED, PAGES, steps_per_page=STEPS, short_texts=not FULL, t_cap=None if FULL else 64)


@pytest.mark.parametrize("index", range(SEQUENCES))
def test_random_sequence_of_changes(index):
    problems = run_sequence(plan(), index, verbose=VERBOSE)
    assert not problems, "\n".join(problems)


def test_replays_the_d_v_crash_sequence():
    """Fresh weights, then d_model, then any change: the browser sends back the d_v list's label
    from before d_model changed ("= d_k (16)"), which no option had any more."""
    s = Session()
    s.apply(Step("model", "src", [state.FRESH]))
    dv = s.widget("dv")
    held = s.held[dv.id]
    s.apply(Step("option", "d", ["32"]))
    assert not errors(s.at), errors(s.at)
    s.apply(Step("value", "T", 40))
    assert not errors(s.at), errors(s.at)
    assert s.at.session_state["dv"] == 0 and s.at.session_state["d"] == 32
    assert s.held[s.widget("dv").id] == held  # the label the browser holds is still an option


def test_session_sends_the_labels_a_browser_holds():
    """The harness itself: the label a browser holds changes only when the server sends one (here
    the heads page's Head list, whose labels name each head's pattern and change with the
    sentence: the page sends the new label, state.follow_labels) or the user picks one."""
    s = Session(query={"detail": "true"})
    head = s.widget("head")
    first = s.held[head.id]
    assert first and first[0].startswith("head 0")
    s.apply(Step("option", "head", [head.proto.options[2]]))
    assert s.at.session_state["head"] == 2
    s.apply(Step("value", "text", "a dog ran to the park and the cat sat on the mat ."))
    node = s.widget("head")
    assert s.held[node.id] == [node.proto.options[2]]  # the browser was told the new label
    assert s.at.session_state["head"] == 2


def test_plan_covers_every_page_and_model_switches():
    import random

    from tests.fuzz.stateful import Plan as P
    p = plan()
    assert set(p.pages) == set(PAGES) and len(PAGES) >= 20
    assert p.model_every > 0 and p.sidebar_burst >= 2
    order = list(p.pages)
    random.Random(p.seed * 7919).shuffle(order)
    assert sorted(order) == sorted(PAGES)
    assert isinstance(P(1, ["x"]).steps_per_page, int)
