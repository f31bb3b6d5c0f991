"""CodeBudget's LRU order with touch's lock-free shortcut (a key already the newest is not moved again): the
translation dropped for room is always the least recently admitted or touched."""
from __future__ import annotations

from pyvgpu_daemon.emu.codebudget import CodeBudget


def _budget(keys: list[str], dropped: list[str]) -> CodeBudget:
    b = CodeBudget(limit=len(keys) * 100)
    for k in keys:
        b.admit(k, 100, lambda k=k: dropped.append(k), k)
    return b


def test_touch_after_an_admit_moves_the_touched_key():
    dropped: list[str] = []
    b = _budget(["a", "b"], dropped)
    b.touch("b")            # already the newest: the shortcut
    b.touch("a")            # not the newest (b was admitted after it): moved
    b.touch("a")            # now the newest: the shortcut
    b.admit("c", 100, lambda: dropped.append("c"), "c")
    assert dropped == ["b"]
    b.touch("a")            # c was admitted after a: a is moved again
    b.admit("d", 100, lambda: dropped.append("d"), "d")
    assert dropped == ["b", "c"]


def test_touch_after_a_forget_or_a_drop_still_orders():
    dropped: list[str] = []
    b = _budget(["a", "b", "c"], dropped)
    b.touch("a")
    b.forget("a")
    b.admit("a", 100, lambda: dropped.append("a"), "a")    # order b, c, a
    b.touch("b")                                            # order c, a, b
    b.admit("d", 100, lambda: dropped.append("d"), "d")
    assert dropped == ["c"]
