"""The quality guard: does a configuration that can change the numbers (a dtype, a KV-cache
dtype, quantization, speculative decoding) still answer as the reference does?

The reference server's greedy answers to a fixed set of prompts are kept. A candidate is then
asked, **teacher-forced**, for its own most likely next token at every position of each
reference answer (the prompt plus the reference's answer sent with ``echo`` and ``logprobs``: a
server that returns prompt log-probabilities, as vLLM does): the agreement is the share of
positions where the candidate's top token is the reference's token. One early divergence then
costs one position, not the rest of the answer. A server that returns no log-probabilities is
compared on its own greedy answers, token by token (by the model's tokenizer, else by words),
labelled as such. Below the threshold the configuration is rejected with the figure, as
``bench`` rejects an accuracy drop.
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
    pass


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


def reference_answers(
    url: str,
    model: str,
    *,
    prompts: Sequence[str] = QUALITY_PROMPTS,
    max_tokens: int = 32,
    timeout_s: float = 120.0,
    api_key: str | None = None,
) -> ReferenceAnswers:
    """The greedy answers of the server at ``url`` (raises ``RuntimeError`` with one line
    when it cannot answer)."""
    answers = []
    for prompt in prompts:
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
        try:
            answers.append(_text(_post(url, body, timeout_s, api_key)))
        except _ServerError as exc:
            raise RuntimeError(f"the reference's quality answers: {exc}") from None
    return ReferenceAnswers(prompts=tuple(prompts), answers=tuple(answers), max_tokens=max_tokens)


def _teacher_forced(
    url: str, model: str, reference: ReferenceAnswers, timeout_s: float, api_key: str | None
) -> tuple[int, int] | None:
    """(positions where the candidate's top token is the reference's, positions), or None
    when the server returns no prompt log-probabilities."""
    agree = total = 0
    for prompt, answer in zip(reference.prompts, reference.answers, strict=True):
        if not answer:
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
        for token, offset, top in zip(tokens, offsets, tops, strict=False):
            if offset < len(prompt) or offset >= len(prompt) + len(answer) or not top:
                continue
            total += 1
            agree += int(max(top.items(), key=lambda item: item[1])[0] == token)
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
