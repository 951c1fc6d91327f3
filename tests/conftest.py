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
BACKGROUND_THREADS = ("flash-memory-", "gradients-", "open-", "attn-lab-train-", "trace-prefetch", "attribution-patch-")
CANCELLABLE = ("attn-lab-train-", "attribution-patch-")  # threads whose first argument is a job with a cancel event


def pytest_sessionfinish(session, exitstatus):
    """Let the pages' background work end before the interpreter does: a daemon thread stopped
    inside a torch op at shutdown aborts the process ("terminate called without an active
    exception", exit 134) after every test has passed. Trainings and patching jobs (the "Why this
    token?" page) are cancelled (their job's cancel event), the rest finish (a few seconds each)."""
    for t in threading.enumerate():
        if t.daemon and t.name.startswith(BACKGROUND_THREADS):
            job = (getattr(t, "_args", None) or (None,))[0]
            if t.name.startswith(CANCELLABLE) and hasattr(job, "cancel"):
                job.cancel.set()
            t.join(timeout=300)


def pytest_report_header(config):
    """Which kernels the numeric tiers run on (make test-cpus holds them to other CPUs' ISAs)."""
    import os

    import torch
    held = {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")
            if k in os.environ}
    return (f"kernels: ATen {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} torch threads"
            + (f"; held by {', '.join(f'{k}={v}' for k, v in held.items())}" if held else "; this CPU's own"))
