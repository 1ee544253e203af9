"""Why a configuration has no measurement (:class:`FailureKind`), decided once from what the
server did (:func:`classify_failure`), never by reading a message again later.

A kind is stored by its name (``out_of_memory``); its sentence (``out of memory``) is for
people. Runs stored before the name was stored hold the sentence: it still reads as the member.
"""

from __future__ import annotations

import enum
import re

__all__ = ["FailureKind", "classify_failure"]


class FailureKind(enum.StrEnum):
    """Why a configuration has no measurement; the value (what is stored) is the name."""

    EXITED = enum.auto()
    TIMEOUT = enum.auto()
    OUT_OF_MEMORY = enum.auto()
    INVALID = enum.auto()
    DIED = enum.auto()
    NO_ANSWER = enum.auto()

    @property
    def description(self) -> str:
        """The kind in words, for the terminal and the report."""
        return _DESCRIPTIONS[self]

    @classmethod
    def read(cls, stored: object) -> object:
        """A stored kind: its name, or the sentence runs stored before the name was (anything
        else is left for validation to refuse)."""
        if isinstance(stored, str) and stored in _BY_SENTENCE:
            return _BY_SENTENCE[stored]
        return stored


_DESCRIPTIONS: dict[FailureKind, str] = {
    FailureKind.EXITED: "exited before it was ready",
    FailureKind.TIMEOUT: "not ready in time",
    FailureKind.OUT_OF_MEMORY: "out of memory",
    FailureKind.INVALID: "configuration refused by the engine",
    FailureKind.DIED: "died while it was measured",
    FailureKind.NO_ANSWER: "ready but did not answer",
}
_BY_SENTENCE = {sentence: kind for kind, sentence in _DESCRIPTIONS.items()}

_OOM = re.compile(
    r"out of memory|OutOfMemory|No available memory for the cache blocks|"
    r"insufficient memory|Cannot allocate memory|std::bad_alloc|KV cache.*(?:not enough|too small)|"
    # vLLM's start-up check: "Available memory on node 0 (11.87/13.21 GiB) on startup is less
    # than desired CPU memory utilization" (a ValueError, which alone reads as a refusal)
    r"(?:Available|Free) memory on (?:node|device).*less than",
    re.IGNORECASE,
)
_INVALID = re.compile(
    r"error: argument|error: unrecognized arguments|ValueError|ValidationError|"
    r"validation error|Invalid value|not supported|must be (?:greater|less|at least|positive)",
    re.IGNORECASE,
)


def classify_failure(exit_code: int | None, log_tail: str, *, timed_out: bool) -> FailureKind:
    """What a failed start was, from the server's exit and its log (the last lines, and the
    first error line, which a traceback chain pushes above them): out of memory (the log says
    so, or the kernel's OOM killer's SIGKILL), a configuration the engine refused (argparse's
    exit 2, a validation error), not ready in time, or exited."""
    if timed_out:
        return FailureKind.TIMEOUT
    if _OOM.search(log_tail) or exit_code in (-9, 137):
        return FailureKind.OUT_OF_MEMORY
    if exit_code == 2 or _INVALID.search(log_tail):
        return FailureKind.INVALID
    return FailureKind.EXITED
