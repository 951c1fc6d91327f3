"""Fixtures of the real-browser tier (see browser.py); `browser` is in tests/conftest.py (one
Playwright per test process, shared with tests/fuzz/test_stateful_browser.py)."""
import pytest

from tests.e2e.browser import Guard, count_runs, serving


@pytest.fixture(scope="session")
def server():
    with serving() as url:
        yield url


@pytest.fixture
def page(browser):
    """A fresh page (own context) whose requests may only go to localhost; dialogs recorded."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1800})
    # a wait for something a rerun draws gets as long as browser.rerun's own wait: in the full run
    # (2,400 tests, one server) a rerun that builds a model can take longer than Playwright's 30 s
    ctx.set_default_timeout(90_000)
    count_runs(ctx)  # tests wait for the script runs they cause (browser.rerun), never for a time
    guard = Guard()
    ctx.route("**/*", guard.route)
    pg = ctx.new_page()
    pg.on("dialog", lambda d: (guard.dialogs.append(d.message), d.dismiss()))
    pg.guard = guard
    yield pg
    ctx.close()
    assert not guard.offsite, f"requests left localhost: {guard.offsite[:5]}"
    assert not guard.dialogs, f"a dialog fired (script ran?): {guard.dialogs}"


