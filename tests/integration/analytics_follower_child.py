"""A follower process for the exactly-once test of the analytics projection (E7).

Usage: ``python analytics_follower_child.py STORE_URL BATCH_SIZE [FOLLOW_SECONDS]``. Opens the
store, catches the analytics tables up in batches of BATCH_SIZE (or follows the log, polling
every 10 ms, for FOLLOW_SECONDS) and exits 0. The test kills it with SIGKILL
at random moments and starts it again; every run must pick up exactly where the committed
tracking position says. Prints ``done N`` (events applied by this run) on success.
"""

from __future__ import annotations

import sys
import threading

from turnledger.projections.analytics import Analytics
from turnledger.store.backend import open_backend


def main(argv: list[str]) -> int:
    url, batch_size = argv[1], int(argv[2])
    with open_backend(url) as backend, Analytics(backend) as analytics:
        if len(argv) > 3:
            stop = threading.Event()
            threading.Timer(float(argv[3]), stop.set).start()
            applied = analytics.follow(0.01, stop, batch_size)
        else:
            applied = analytics.catch_up(batch_size=batch_size)
    print(f"done {applied}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
