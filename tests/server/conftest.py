"""Fixtures of the server's tests: a store, the app on it, and a live server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import turnledger as tl
from tests.backends import ALL_BACKENDS, fresh_target
from tests.extras import need
from tests.server.live import serving


@pytest.fixture(params=ALL_BACKENDS)
def server_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A live server (no keys) on a fresh store of each backend."""
    need("starlette")
    from turnledger.server.app import Settings, create_app

    with fresh_target(request.param, tmp_path) as target, tl.open_store(target.url) as store:
        app = create_app(store, Settings(store_url=target.url))
        with serving(app) as url:
            yield url
