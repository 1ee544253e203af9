"""The quality guard: does a configuration that can change the numbers (a dtype, a KV-cache
dtype, quantization, speculative decoding) still answer as the reference does?

The reference server's greedy answers to a fixed set of prompts are kept, and, **teacher
forced**, its own most likely token at every position of each answer (the prompt and the answer
sent in one request with ``echo`` and ``logprobs``: a server that returns prompt
log-probabilities, as vLLM does). A candidate reads the same texts the same way; the agreement
is the share of positions where its most likely token is the reference's. One early divergence
then costs one position, not the rest of the answer, and both sides are read in one pass (a
model's greedy decode and its one-pass reading of the same text can round differently: a
random-weights model, whose logits are nearly flat, disagreed with itself on 27 % of positions
that way, which a comparison against the greedy tokens would blame on the candidate). A
server that returns no log-probabilities is compared on its own greedy answers, token by token
(by the model's tokenizer, else by words), labelled as such. Below the threshold the
configuration is rejected with the figure, as ``bench`` rejects an accuracy drop.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Sequence
from typing import Any, Literal

from accelscope.documents import Document
from accelscope.errors import one_line
from accelscope.llm.workload import TokenCounter

__all__ = [
    "DEFAULT_THRESHOLD",
    "QUALITY_PROMPTS",
    "QualityResult",
    "ReferenceAnswers",
    "check_quality",
    "reference_answers",
    "token_agreement",
]

DEFAULT_THRESHOLD = 0.9
"""A candidate whose agreement with the reference is below this is rejected."""

QUALITY_PROMPTS: tuple[str, ...] = (
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "A list of the planets of the solar system, in order:",
    "Translate to German: the weather is nice today.",
    "The model serves tokens to users at scale while",
    "Question: what is 17 times 3? Answer:",
    "Once upon a time, in a small village by the sea,",
    "The three laws of thermodynamics are",
)
"""Fixed prompts, varied in kind (facts, code, lists, translation, arithmetic, prose)."""

Method = Literal["teacher-forced", "greedy tokens"]


class ReferenceAnswers(Document):
    """The reference configuration's greedy answers to :data:`QUALITY_PROMPTS`."""

    prompts: tuple[str, ...]
    answers: tuple[str, ...]
    max_tokens: int
    forced_tops: tuple[tuple[str, ...], ...] | None = None
    """The reference's own most likely token at each position of its answers, teacher
    forced (None: the server returns no log-probabilities)."""


class QualityResult(Document):
    """A candidate's agreement with the reference and the verdict."""

    method: Method
    agreement: float
    threshold: float
    positions: int
    prompts: int
    passed: bool
    why: str = ""


class _ServerError(Exception):
    """The server's answer to a quality prompt could not be used (its one-line reason)."""


def _post(url: str, body: dict[str, Any], timeout_s: float, api_key: str | None) -> Any:
    parsed = urllib.parse.urlsplit(url)
    connection_type = (
        http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
    )
    connection = connection_type(parsed.hostname or "127.0.0.1", parsed.port, timeout=timeout_s)
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        connection.request("POST", "/v1/completions", body=json.dumps(body), headers=headers)
        answer = connection.getresponse()
        payload = answer.read()
    except (OSError, http.client.HTTPException) as exc:
        raise _ServerError(one_line(f"{type(exc).__name__}: {exc}")) from None
    finally:
        connection.close()
    if answer.status != 200:
        raise _ServerError(f"HTTP {answer.status}: {one_line(payload.decode('utf-8', 'replace'))}")
    try:
        return json.loads(payload)
    except json.JSONDecodeError:
        raise _ServerError("the answer is not JSON") from None


def _text(payload: Any) -> str:
    try:
        text = payload["choices"][0]["text"]
    except (KeyError, IndexError, TypeError):
        raise _ServerError("no choices[0].text in the answer") from None
    return text if isinstance(text, str) else ""


def _forced_tops(
    url: str,
    model: str,
    prompts: Sequence[str],
    answers: Sequence[str],
    timeout_s: float,
    api_key: str | None,
) -> tuple[tuple[str, ...], ...] | None:
    """Per prompt, the server's most likely token at every position of the answer, teacher
    forced (the prompt and the answer sent in one request with ``echo`` and ``logprobs``);
    ``None`` when the server returns no prompt log-probabilities."""
    found: list[tuple[str, ...]] = []
    for prompt, answer in zip(prompts, answers, strict=True):
        if not answer:
            found.append(())
            continue
        body = {
            "model": model,
            "prompt": prompt + answer,
            "max_tokens": 1,
            "temperature": 0.0,
            "echo": True,
            "logprobs": 1,
        }
        payload = _post(url, body, timeout_s, api_key)
        try:
            logprobs = payload["choices"][0]["logprobs"]
            tokens, offsets, tops = (
                logprobs["tokens"],
                logprobs["text_offset"],
                logprobs["top_logprobs"],
            )
        except (KeyError, IndexError, TypeError):
            return None
        if not isinstance(tokens, list) or not isinstance(tops, list) or len(tops) < len(tokens):
            return None
        found.append(
            tuple(
                max(top.items(), key=lambda item: item[1])[0]
                for offset, top in zip(offsets, tops, strict=False)
                if len(prompt) <= offset < len(prompt) + len(answer) and top
            )
        )
    return tuple(found)


def reference_answers(
    url: str,
    model: str,
    *,
    prompts: Sequence[str] = QUALITY_PROMPTS,
    max_tokens: int = 32,
    timeout_s: float = 120.0,
    api_key: str | None = None,
) -> ReferenceAnswers:
    """The greedy answers of the server at ``url``, and its own teacher-forced top tokens
    over them when it returns log-probabilities (raises ``RuntimeError`` with one line when
    it cannot answer)."""
    answers = []
    try:
        for prompt in prompts:
            body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
            answers.append(_text(_post(url, body, timeout_s, api_key)))
        tops = _forced_tops(url, model, prompts, answers, timeout_s, api_key)
    except _ServerError as exc:
        raise RuntimeError(f"the reference's quality answers: {exc}") from None
    return ReferenceAnswers(
        prompts=tuple(prompts), answers=tuple(answers), max_tokens=max_tokens, forced_tops=tops
    )


def _teacher_forced(
    url: str, model: str, reference: ReferenceAnswers, timeout_s: float, api_key: str | None
) -> tuple[int, int] | None:
    """(positions where the candidate's teacher-forced top token is the reference's own
    teacher-forced top token, positions): both servers read the same text in one pass, so a
    configuration that changes nothing agrees everywhere; ``None`` when either returns no
    prompt log-probabilities."""
    if reference.forced_tops is None:
        return None
    mine = _forced_tops(url, model, reference.prompts, reference.answers, timeout_s, api_key)
    if mine is None:
        return None
    agree = total = 0
    for theirs, ours in zip(reference.forced_tops, mine, strict=True):
        total += max(len(theirs), len(ours))
        agree += sum(1 for a, b in zip(theirs, ours, strict=False) if a == b)
    return agree, total


def token_agreement(
    reference: Sequence[str], candidate: Sequence[str], tokenizer: TokenCounter | None
) -> tuple[int, int]:
    """(equal positions, positions) of two lists of answers, token by token (by
    ``tokenizer``, else by words); a missing or extra token counts as a difference."""
    agree = total = 0
    for ours, theirs in zip(reference, candidate, strict=True):
        if tokenizer is not None:
            a = tokenizer.encode(ours, add_special_tokens=False)
            b = tokenizer.encode(theirs, add_special_tokens=False)
        else:
            a, b = ours.split(), theirs.split()  # type: ignore[assignment]
        total += max(len(a), len(b))
        agree += sum(1 for x, y in zip(a, b, strict=False) if x == y)
    return agree, total


def check_quality(
    url: str,
    model: str,
    reference: ReferenceAnswers,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    tokenizer: TokenCounter | None = None,
    timeout_s: float = 120.0,
    api_key: str | None = None,
) -> QualityResult:
    """The candidate at ``url`` against the reference's answers (see the module)."""
    try:
        forced = _teacher_forced(url, model, reference, timeout_s, api_key)
        method: Method = "teacher-forced"
        if forced is None:
            method = "greedy tokens"
            mine = reference_answers(
                url,
                model,
                prompts=reference.prompts,
                max_tokens=reference.max_tokens,
                timeout_s=timeout_s,
                api_key=api_key,
            )
            forced = token_agreement(reference.answers, mine.answers, tokenizer)
    except (_ServerError, RuntimeError) as exc:
        return QualityResult(
            method="teacher-forced",
            agreement=0.0,
            threshold=threshold,
            positions=0,
            prompts=len(reference.prompts),
            passed=False,
            why=f"not measured: the server did not answer ({exc})",
        )
    agree, total = forced
    agreement = agree / total if total else 1.0
    passed = agreement >= threshold
    why = (
        ""
        if passed
        else f"agreement {agreement:.1%} with the reference is below {threshold:.0%} "
        f"({method}, {total} positions of {len(reference.prompts)} prompts)"
    )
    return QualityResult(
        method=method,
        agreement=agreement,
        threshold=threshold,
        positions=total,
        prompts=len(reference.prompts),
        passed=passed,
        why=why,
    )
