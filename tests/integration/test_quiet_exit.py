"""A process that exits with turnledger objects alive exits quietly.

`chat_of`'s memo forgets an item through a weakref callback when the item dies; at
interpreter shutdown module globals are already None when the last items die, and a callback
that looked the memo up by its global name raised in each of them ("Exception ignored in:
functools.partial(<function _forget_chat ...>)", 800 lines for 20 SDK calls made from threads
with a profile function set, as a profiler or a coverage tool sets one)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.extras import need

ROOT = Path(__file__).resolve().parents[2]


def test_a_process_exiting_with_live_sessions_prints_no_ignored_exception() -> None:
    need("agents")
    script = textwrap.dedent("""
        import threading
        import turnledger as tl
        from tests.integration.many_objects_child import ADDERS, run_calls

        threading.setprofile(lambda *args: None)  # as a profiler or a coverage tool does
        with tl.open_store("memory://") as store:
            adders = ADDERS["sdk"](store, 50)
            assert run_calls(adders, range(20), 10) == []
        print("done")
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "done"), done.stderr[-2000:]
    assert "Exception ignored" not in done.stderr, done.stderr[:2000]
