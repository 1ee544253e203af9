"""The one context-manager shape of the real services tests start (Prometheus, a Ray cluster,
``transformers serve``, the fake LLM server): ``start()`` on entry, ``stop()`` on exit, and
``stop()`` also when ``start()`` fails half-way, so nothing a test started outlives it."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["Service"]


class Service:
    """Subclasses define ``start`` and an idempotent ``stop``."""

    def start(self) -> None:
        """Start the service; raise when it cannot serve."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop whatever was started (safe to call twice, and after a failed start)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
