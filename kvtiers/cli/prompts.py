"""Prompts of a target token length: sized with the server's tokenizer when it has one, estimated otherwise."""

from __future__ import annotations

import uuid
from collections.abc import Callable

_WORDS = [
    "the",
    "cache",
    "keeps",
    "recent",
    "prefix",
    "blocks",
    "close",
    "to",
    "the",
    "accelerator",
    "while",
    "older",
    "blocks",
    "move",
    "to",
    "host",
    "memory",
    "and",
    "then",
    "to",
    "shared",
    "storage",
    "across",
    "nodes",
    "so",
    "that",
    "another",
    "replica",
    "can",
    "read",
    "them",
    "instead",
    "of",
    "recomputing",
    "every",
    "attention",
    "key",
    "and",
    "value",
    "for",
    "a",
    "long",
    "system",
    "prompt",
    "retrieved",
    "document",
    "or",
    "earlier",
    "conversation",
    "turn",
]
ESTIMATED_TOKENS_PER_WORD = 1.0
"""Common lower-case English words are about one token each for Llama/Qwen tokenizers (the fallback estimate)."""


def nonce() -> str:
    return uuid.uuid4().hex[:12]


def prefix(tag: str) -> str:
    """A unique leading line: different first tokens, so no cache tier can hold any block of the prompt."""
    return f"Request {tag}: summarise the notes below.\n"


def filler(words: int) -> str:
    return " ".join(_WORDS[i % len(_WORDS)] for i in range(max(words, 0)))


def sized_filler(
    target_tokens: int, count_tokens: Callable[[str], int | None], tag: str | None = None
) -> tuple[str, bool]:
    """Filler text such that ``prefix(tag) + filler`` is ``target_tokens`` long on the server's tokenizer.

    Returns ``(filler, measured)``; ``measured`` is False when the server has no ``/tokenize`` (the length is then an
    estimate and the caller reports the server's ``usage.prompt_tokens``). At most eight tokenize calls.
    """
    tag = tag or "0" * 12
    words = int(target_tokens / ESTIMATED_TOKENS_PER_WORD)
    seen: set[int] = set()
    for _ in range(8):
        count = count_tokens(prefix(tag) + filler(words))
        if count is None:
            return filler(words), False
        if count == target_tokens or words in seen:
            break
        seen.add(words)
        step = target_tokens - count
        words = max(1, words + (step if abs(step) < 8 else int(step / max(count / max(words, 1), 0.1))))
    return filler(words), True
