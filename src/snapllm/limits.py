"""A deployment's limits on a parsed request: one check, run once per hop.

The router checks them before it invokes anything; the engine, before it tokenizes (for the direct invoke
and the streaming function alike)::

    Limits(max_tokens=512, max_prompt_chars=32_000).check(request)
"""

from __future__ import annotations

from dataclasses import dataclass

from snapllm.contract import InferenceRequest, prompt_text
from snapllm.errors import ContextLengthExceededError, InvalidRequestError


@dataclass(frozen=True)
class Limits:
    """``max_tokens`` caps what a request may ask to generate; ``max_prompt_chars`` the prompt's length in
    characters, checked before anything is tokenized (a prompt's tokens are checked by the engine)."""

    max_tokens: int
    max_prompt_chars: int | None = None

    def check(self, request: InferenceRequest) -> None:
        requested = request.requested_max_tokens
        if requested is not None and requested > self.max_tokens:
            raise InvalidRequestError(
                f"max_tokens is {requested}; this deployment allows at most {self.max_tokens}",
                param="max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens",
            )
        if self.max_prompt_chars is None:
            return
        text, param = prompt_text(request)
        if len(text) > self.max_prompt_chars:
            raise ContextLengthExceededError(
                f"the prompt is {len(text)} characters; this deployment accepts at most "
                f"{self.max_prompt_chars}",
                param=param,
            )
