"""Stateful fuzz in real Chromium (issue 33 point 2; tests/fuzz/browser_fuzz.py): random changes
through the widgets themselves, labels and reruns as the browser makes them.

CI: one fixed-seed sequence over FUZZ_BROWSER_PAGES pages (default 10, a seeded choice that
changes with the seed), FUZZ_BROWSER_STEPS changes on each (default 1) plus sidebar changes after
each model switch. `make fuzz` (FUZZ_FULL=1): every page, 3 changes each, 3 sequences, long texts.
"""
from __future__ import annotations

import os
import random

import pytest

from benchmarks.soak import app_constant
from tests.e2e.browser import Guard, count_runs, serving
from tests.fuzz.browser_fuzz import BrowserPlan, run_sequence
from tests.helpers import ROOT

pytestmark = [pytest.mark.fuzz, pytest.mark.e2e]

FULL = os.environ.get("FUZZ_FULL") == "1"
SEED = int(os.environ.get("FUZZ_SEED", "33"))
SEQUENCES = int(os.environ.get("FUZZ_BROWSER_SEQUENCES", "3" if FULL else "1"))
STEPS = int(os.environ.get("FUZZ_BROWSER_STEPS", "3" if FULL else "1"))
TITLES = [title for _, file, title, _, _ in app_constant("PAGES") if (ROOT / file).exists()]
N_PAGES = len(TITLES) if FULL else int(os.environ.get("FUZZ_BROWSER_PAGES", "10"))


@pytest.fixture(scope="module")
def server():
    with serving() as url:
        yield url


@pytest.mark.parametrize("index", range(SEQUENCES))
def test_random_changes_through_the_widgets(server, browser, index):
    pages = random.Random(SEED + index).sample(TITLES, N_PAGES)
    plan = BrowserPlan(SEED, pages, steps_per_page=STEPS, long_texts=FULL)
    ctx = browser.new_context(viewport={"width": 1400, "height": 1800})
    count_runs(ctx)
    guard = Guard()
    ctx.route("**/*", guard.route)
    page = ctx.new_page()
    page.on("dialog", lambda d: (guard.dialogs.append(d.message), d.dismiss()))
    try:
        problems = run_sequence(page, server, plan, index)
    finally:
        ctx.close()
    assert not problems, "\n".join(problems)
    assert not guard.offsite and not guard.dialogs, (guard.offsite[:3], guard.dialogs[:3])
