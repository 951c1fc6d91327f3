"""One watcher per server process: the rooms this process has followers of, read once every
WATCH_EVERY seconds, so a change made on another process (another replica, or another machine
with Redis) reaches this process's followers at once, as a change made here does.

Without it, a follower whose lecturer is on another process found each change by its own check,
once a second: each check is a script run of its own (~2-4 ms of the server's CPU, whatever it
reads), so idle following on two replicas cost twice what it cost on one. The watcher reads one
RoomState per room (no check-in) and, when the room's view, poll or status moved, calls
`on_change(code, what)` (what: "view", "poll" or "end"); the followers' own checks stay, slower, as
the fallback for presence and for a watcher that misses a beat.

Pure Python (a daemon thread), no Streamlit: ui/live.py gives it the rooms to watch and what a
change does (rerun that room's followers here)."""
from __future__ import annotations

import threading
import time
from typing import Callable, Iterable

from .rooms import RoomState, RoomStore, StoreUnavailable

WATCH_EVERY = 0.5  # seconds between two reads of the watched rooms


class RoomWatcher:
    def __init__(self, store: Callable[[], RoomStore], rooms: Callable[[], Iterable[str]],
                 on_change: Callable[[str, str], None], every: float = WATCH_EVERY):
        self._store, self._rooms, self._on_change, self.every = store, rooms, on_change, every
        self._last: dict[str, tuple] = {}  # code -> (view_key, poll_key, status) last read
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def ensure_running(self) -> None:
        """Start the thread unless it runs (called at each follower's check: cheap)."""
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._loop, name="attention-lab-room-watcher", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.tick()
            except Exception:  # noqa: BLE001  a watcher never dies of one bad read; the checks remain
                time.sleep(self.every)

    def tick(self) -> list[tuple[str, str]]:
        """Read each watched room once; call on_change for each that moved since the last read (a
        room seen for the first time only sets its mark). Returns the changes [(code, what)]."""
        codes = set(self._rooms())
        for code in [c for c in self._last if c not in codes]:
            del self._last[code]
        changes = []
        for code in sorted(codes):
            try:
                rs = self._store().state(code)
            except StoreUnavailable:
                continue
            mark = _mark(rs)
            before = self._last.get(code)
            self._last[code] = mark
            if before is None or before == mark or mark[2] == "gone":  # gone: the followers' checks say so
                continue
            what = "end" if mark[2] != "open" else "view" if mark[0] != before[0] else "poll"
            changes.append((code, what))
            self._on_change(code, what)
            if what == "view" and mark[1] != before[1]:  # both moved in one beat: the poll too
                changes.append((code, "poll"))
                self._on_change(code, "poll")
        return changes


def _mark(rs: RoomState | None) -> tuple:
    if rs is None:  # expired or gone: its followers read that at their own check
        return (None, None, "gone")
    return (rs.view_key, rs.poll_key, rs.status)
