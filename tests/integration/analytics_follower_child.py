"""A follower process for the exactly-once test of the analytics projection (E7).

Usage: ``python analytics_follower_child.py STORE_URL BATCH_SIZE``. Opens the store, catches
the analytics tables up in batches of BATCH_SIZE and exits 0. The test kills it with SIGKILL
at random moments and starts it again; every run must pick up exactly where the committed
tracking position says. Prints ``done N`` (events applied by this run) on success.
"""

from __future__ import annotations

import sys

from turnledger.projections.analytics import Analytics
from turnledger.store.backend import open_backend


def main(argv: list[str]) -> int:
    url, batch_size = argv[1], int(argv[2])
    with open_backend(url) as backend, Analytics(backend) as analytics:
        applied = analytics.catch_up(batch_size=batch_size)
    print(f"done {applied}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
