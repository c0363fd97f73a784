"""turnledger's store: the event store, its backends, sessions and the write path."""

from typing import Final

DEFAULT_STORE_URL: Final = "sqlite:///./turnledger.db"
"""The store a command or `open_store` uses when none is named: ``./turnledger.db``. Here, in
the package's light ``__init__``, so that the command line's parser shows it without loading
the store (``turnledger --help`` stays fast, issue 20)."""
