"""The proxy tests need Debian's nginx (`make system-deps`). A skip for that reason must not hide
in a skip count: repeat it as a banner at the end of the terminal summary."""
from __future__ import annotations


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    missing = [r for r in terminalreporter.stats.get("skipped", [])
               if "NGINX MISSING" in str(getattr(r, "longrepr", ""))]
    if missing:
        reason = str(missing[0].longrepr[-1]) if isinstance(missing[0].longrepr, tuple) else str(missing[0].longrepr)
        terminalreporter.write_sep("!", f"{len(missing)} proxy tests SKIPPED: nginx missing", red=True, bold=True)
        terminalreporter.write_line(reason, red=True)
