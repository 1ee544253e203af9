"""Atomic file writes: the one implementation every writer uses (reports, caches, traces, the
doctor child's results). A reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: Path, data: str | bytes, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same directory, fsync it,
    then rename it over ``path``; return ``path``. Raises ``OSError`` (the temporary file is
    removed); callers turn it into their one-line error."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
