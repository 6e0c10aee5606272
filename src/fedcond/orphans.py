"""Worker processes die with the process that started them.

A pool worker whose parent is killed outright (SIGKILL: no `finally` runs, nobody stops the pool)
would otherwise go on computing for nobody, and then wait for work forever. On Linux the kernel
signals it the moment its parent dies (prctl PR_SET_PDEATHSIG); everywhere, and as a fallback,
a daemon thread checks every second that its parent is still the process that started it.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCH_SECONDS = 1.0


def die_with_parent() -> None:
    """Call first in a worker process (a pool's or a manager's initializer)."""
    parent = mp.parent_process()  # the pid that started us, even if it died before this line
    parent_pid = parent.pid if parent is not None else os.getppid()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watchdog still runs
    threading.Thread(target=_watch, args=(parent_pid,), daemon=True, name="die-with-parent").start()


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:  # an orphan is adopted by another process (init or a subreaper)
        time.sleep(WATCH_SECONDS)
    os._exit(1)
