"""Files turnledger writes for its user (keys, anchors, reports): private to their owner."""

from __future__ import annotations

import os

__all__ = ["write_private"]


def write_private(path: str | os.PathLike[str], text: str, *, replace: bool = True) -> None:
    """Write ``text`` (UTF-8) to ``path``, readable and writable by its owner only (mode 0600),
    whether the file is new or not: an existing file's wider mode is narrowed before its old
    content is cut, so a file that cannot be made private (not the caller's) is left as it was
    (`PermissionError`). ``replace`` False: an existing file is refused (`FileExistsError`)
    and left as it was. Other `OSError`s as the system raises them."""
    flags = os.O_WRONLY | os.O_CREAT | (0 if replace else os.O_EXCL)
    descriptor = os.open(path, flags, 0o600)
    try:
        os.fchmod(descriptor, 0o600)
        os.ftruncate(descriptor, 0)
    except BaseException:
        os.close(descriptor)
        raise
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
