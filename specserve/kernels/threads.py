"""How many compute threads to use when the user leaves it to us (-t 0)."""
from __future__ import annotations

import os
from pathlib import Path


def _threads_per_core() -> int:
    """SMT siblings per core (1 when the topology cannot be read)."""
    try:
        siblings = Path("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list").read_text().strip()
    except OSError:
        return 1
    count = 0
    for part in siblings.split(","):
        lo, _, hi = part.partition("-")
        count += int(hi) - int(lo) + 1 if hi else 1
    return max(1, count)


def default_threads() -> int:
    """Physical cores among the CPUs this process may run on: hyper-threads share one core's
    vector units, so a second thread per core only adds contention to memory-bound decoding."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    return max(1, usable // _threads_per_core())
