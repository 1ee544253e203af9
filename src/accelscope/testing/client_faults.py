"""A fault at a moment the client observed, for tests of real servers: :class:`AfterAnswers`
wraps the OpenAI client's ``stream`` so that once ``count`` requests (not the endpoint's
check) have been answered whole, ``action`` runs in the client thread that received the last of
them, before that thread sends anything more. So "kill the server after the second answer"
happens after the second answer on a fast machine as on a slow one, never after a sleep."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from accelscope.llm.client import OpenAIEndpoint
from accelscope.llm.documents import RequestRecord
from accelscope.llm.records import LlmRequest

__all__ = ["AfterAnswers"]


class AfterAnswers:
    """Runs ``action`` once, in the client thread that received the ``count``-th whole
    answer; ``received`` holds every answer that completed (before and after)."""

    def __init__(self, count: int, action: Callable[[], None]) -> None:
        self.count = count
        self.action = action
        self.received: list[RequestRecord] = []
        self._lock = threading.Lock()

    def install(self, setattr_: Callable[[Any, str, Any], None]) -> AfterAnswers:
        """Patch ``OpenAIEndpoint.stream`` through ``setattr_`` (pytest's
        ``monkeypatch.setattr``, which undoes it after the test)."""
        original = OpenAIEndpoint.stream

        def stream(endpoint: OpenAIEndpoint, request: LlmRequest, **kwargs: Any) -> RequestRecord:
            record = original(endpoint, request, **kwargs)
            if request.index >= 0 and record.ok:  # not the check
                with self._lock:
                    self.received.append(record)
                    if len(self.received) == self.count:
                        self.action()
            return record

        setattr_(OpenAIEndpoint, "stream", stream)
        return self
