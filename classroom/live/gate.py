"""A first-come, first-served gate for the page runs that followers start when the lecturer's view
changes (ui/live.py). Pure Python (threads only).

When the lecturer changes the view, every follower in a server process reruns its page within the
next poll period. Started together, those runs share one interpreter lock and a few cores: each gets
a slice in turn, so all of them finish near the end, and switching between ~100 threads costs time
of its own. Measured with 100 protocol-level students (benchmarks/bench_live.py, docs/benchmarks.md):
the median student saw the change almost as late as the last one. Through this gate at most `slots`
follower runs proceed at a time, in the order they arrived, so the first followers see the change
after their own run's time, not after everyone's. Nobody waits for ever: a holder that does not
leave (a run that ended without its closing hook) loses its slot after `lease` seconds, and a waiter
gives up after the timeout it asks for (it then runs anyway).
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable, Hashable


class Gate:
    """At most `slots` owners inside; the others wait in line and are let in one by one, in the
    order they came, each woken alone (a line of 100 waiters is not woken 100 times per turn)."""

    def __init__(self, slots: int = 2, lease: float = 5.0, clock: Callable[[], float] = time.monotonic):
        if slots < 1:
            raise ValueError("a gate needs at least one slot")
        self.slots, self.lease, self._clock = slots, lease, clock
        self._lock = threading.Lock()
        self._holders: dict[Hashable, float] = {}  # owner -> when it entered
        self._queue: OrderedDict[Hashable, threading.Event] = OrderedDict()  # waiting owners, first come first

    def _admit(self) -> None:
        """(lock held) Reclaim the slots of holders past their lease; let the first in line in."""
        now = self._clock()
        for owner in [o for o, t in self._holders.items() if now - t > self.lease]:
            del self._holders[owner]
        while self._queue and len(self._holders) < self.slots:
            owner, admitted = self._queue.popitem(last=False)
            self._holders[owner] = now
            admitted.set()

    def enter(self, owner: Hashable, timeout: float) -> bool:
        """Wait for a slot (first come, first served). True: `owner` holds a slot (already held:
        refreshed); False: not within `timeout` seconds (the caller goes on without one)."""
        with self._lock:
            if owner in self._holders:
                self._holders[owner] = self._clock()
                return True
            if owner in self._queue:  # one owner waits once (a second caller does not queue twice)
                return False
            admitted = self._queue[owner] = threading.Event()
            self._admit()
            if admitted.is_set():
                return True
        deadline = time.monotonic() + timeout
        while True:
            # wake at least every lease/4 to reclaim a slot whose holder left without a word
            if admitted.wait(max(0.0, min(deadline - time.monotonic(), self.lease / 4))):
                return True
            with self._lock:
                self._admit()
                if admitted.is_set():
                    return True
                if time.monotonic() >= deadline:
                    del self._queue[owner]
                    return False

    def leave(self, owner: Hashable) -> None:
        """Give the slot back (nothing if `owner` holds none); the first in line goes in."""
        with self._lock:
            if self._holders.pop(owner, None) is not None:
                self._admit()

    def holders(self) -> int:
        with self._lock:
            return len(self._holders)

    def waiting(self) -> int:
        with self._lock:
            return len(self._queue)
