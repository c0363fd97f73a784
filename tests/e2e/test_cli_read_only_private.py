"""The read-only e2e tests in a checkout other users cannot enter (issue 19, point 7).

They run the CLI as ``nobody`` when the tests run as root; in a private directory (a
``mktemp -d`` folder, a private home) ``nobody`` cannot even start the checkout's Python, and
they failed with ``No module named turnledger``. Here a copy of the checkout and a venv for it
(its packages: this venv's, through a ``.pth`` line) sit in a ``mktemp -d`` folder, and
``test_cli_read_only.py`` runs there in a pytest subprocess: as root its tests skip, naming the
closed directory; as any other user they run and pass (the user reads its own folder).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO, clean_env, describe

OUTCOME = re.compile(r"^(\d+) (passed|skipped|failed|errors?)", re.MULTILINE)


@pytest.fixture
def private_checkout() -> Iterator[tuple[Path, Path]]:
    """(a copy of the checkout, the python of its venv), in a fresh ``mktemp -d`` folder."""
    folder = Path(tempfile.mkdtemp(prefix="tl-private-"))  # mode 0700, as mktemp -d makes it
    try:
        checkout = folder / "checkout"
        for name in ("turnledger", "tests"):
            shutil.copytree(REPO / name, checkout / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(REPO / "pyproject.toml", checkout)
        venv = folder / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                       capture_output=True)
        python = venv / "bin" / "python"
        site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
        # As an editable install does: the checkout on the path, the packages beside it.
        ours = sysconfig.get_paths()["purelib"]
        Path(site, "checkout.pth").write_text(f"{checkout}\n{ours}\n", encoding="utf-8")
        yield checkout, python
    finally:
        shutil.rmtree(folder)


def test_i19_p7_read_only_tests_in_a_private_checkout_skip_saying_why(
    private_checkout: tuple[Path, Path],
) -> None:
    """As root they skip, naming the folder other users cannot enter; otherwise they pass."""
    checkout, python = private_checkout
    result = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "tests/e2e/test_cli_read_only.py"],
        cwd=checkout, env=clean_env(), stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=600, check=False,
    )
    outcome = {kind: int(count) for count, kind in OUTCOME.findall(result.stdout)}
    if os.geteuid() != 0:
        assert ({"passed": 4}, 0) == (outcome, result.returncode), describe(result)
        return
    assert ({"skipped": 4}, 0) == (outcome, result.returncode), describe(result)
    folder = checkout.parent
    assert (f"the read-only commands run as nobody (uid 65534), who cannot run this checkout's "
            f"turnledger ({checkout / 'turnledger'}) with {python}") in result.stdout
    assert f"; {folder} is mode 0700, closed to other users;" in result.stdout
