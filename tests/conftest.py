import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


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
