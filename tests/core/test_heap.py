"""A long-running process freezes its startup heap out of the collector's full passes."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def in_child(code: str) -> None:
    """Run ``code`` in a child Python, which must print ``ok``: the collector's settings are
    the whole process's, which pytest's must not get."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_settle_freezes_what_is_loaded_and_still_collects_later_garbage() -> None:
    # In a child: the freeze is for the whole process, which pytest's must not get.
    code = textwrap.dedent("""
        import gc
        from recalld import heap

        loaded = [[i] for i in range(1000)]
        gc.set_threshold(700, 10, 10)  # Python's default
        frozen = heap.settle()
        assert frozen == gc.get_freeze_count() >= 1000, frozen
        assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, 10, 10)
        assert not any(o is loaded for o in gc.get_objects())  # no pass walks it again

        class Node:
            pass

        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle made after startup, then dropped
        del a, b
        assert gc.collect() >= 2
        print("ok")
    """)
    in_child(code)


def test_settle_keeps_a_larger_threshold_and_a_collector_turned_off() -> None:
    code = textwrap.dedent("""
        import gc
        from recalld import heap

        gc.set_threshold(50_000, 20, 5)
        heap.settle()
        assert gc.get_threshold() == (50_000, 20, 5)
        gc.set_threshold(0, 10, 10)
        heap.settle()
        assert gc.get_threshold() == (0, 10, 10)
        print("ok")
    """)
    in_child(code)
