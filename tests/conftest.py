import os
import sys
import tempfile
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The live class's default room store is a SQLite file under the data folder: every server a test
# starts (it inherits this environment) writes under a folder of this test run, never the user's.
if "ATTN_LAB_DATA_DIR" not in os.environ:
    os.environ["ATTN_LAB_DATA_DIR"] = tempfile.mkdtemp(prefix="attention-lab-test-data-")


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium through Playwright, one per test process: a second `sync_playwright()` while
    one is open fails ("Sync API inside the asyncio loop"), so every browser test shares this one."""
    from tests.e2e.browser import ARGS, CHROMIUM
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's Chromium is missing: apt-get install -y --no-install-recommends chromium")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


# the app's background threads (daemon threads running torch): ui/flash.py's memory curve,
# ui/gradients.py's runs, ui/disk_models.py's loads, ui/train.py's trainings
BACKGROUND_THREADS = ("flash-memory-", "gradients-", "open-", "attn-lab-train-", "trace-prefetch")


def pytest_sessionfinish(session, exitstatus):
    """Let the pages' background work end before the interpreter does: a daemon thread stopped
    inside a torch op at shutdown aborts the process ("terminate called without an active
    exception", exit 134) after every test has passed. Trainings are cancelled (their job's
    cancel event), the rest finish (a few seconds each)."""
    for t in threading.enumerate():
        if t.daemon and t.name.startswith(BACKGROUND_THREADS):
            job = (getattr(t, "_args", None) or (None,))[0]
            if t.name.startswith("attn-lab-train-") and hasattr(job, "cancel"):
                job.cancel.set()
            t.join(timeout=300)
