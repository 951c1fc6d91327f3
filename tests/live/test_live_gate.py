"""The followers' gate (classroom/live/gate.py): at most `slots` holders, first come first served,
a holder that never leaves loses its slot after the lease, a waiter gives up after its timeout; and
the app's followers take a slot to apply a view and give it back when the run completes."""
from __future__ import annotations

import threading
import time

import pytest

from classroom.live import Gate
from tests.live.conftest import FakeClock


def test_slots_limit_and_leave():
    g = Gate(slots=2)
    assert g.enter("a", 1) and g.enter("b", 1)
    assert g.holders() == 2
    assert not g.enter("c", 0.01)  # full: c gives up (and is not left in the queue)
    assert g.waiting() == 0 and g.holders() == 2
    assert g.enter("a", 0.01)  # a holder entering again keeps its slot
    g.leave("a")
    g.leave("nobody")  # no slot: nothing happens
    assert g.holders() == 1 and g.enter("c", 0.01) and g.holders() == 2


def test_first_come_first_served():
    g = Gate(slots=1)
    assert g.enter("first", 1)
    order: list[str] = []

    def wait(name: str) -> None:
        assert g.enter(name, 30)
        order.append(name)
        g.leave(name)

    threads = []
    for i in range(5):
        t = threading.Thread(target=wait, args=(f"w{i}",))
        t.start()
        threads.append(t)
        while g.waiting() < i + 1:  # the next waiter arrives after this one is in line
            time.sleep(0.001)
    assert g.waiting() == 5 and order == []
    g.leave("first")
    for t in threads:
        t.join(30)
    assert order == [f"w{i}" for i in range(5)]
    assert g.holders() == 0 and g.waiting() == 0


def test_a_holder_that_never_leaves_loses_its_slot_after_the_lease():
    clock = FakeClock()
    g = Gate(slots=1, lease=5.0, clock=clock)
    assert g.enter("gone", 1)
    clock.advance(4.9)
    assert not g.enter("next", 0.01)
    clock.advance(0.2)
    assert g.enter("next", 0.01) and g.holders() == 1


def test_a_gate_needs_a_slot():
    with pytest.raises(ValueError):
        Gate(slots=0)
