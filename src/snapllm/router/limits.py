"""Deployment limits on a parsed request that need no model (the contract itself checks the text).

check_request_text(request, max_prompt_chars=32_000)
"""

from __future__ import annotations

from snapllm.contract import InferenceRequest, prompt_text
from snapllm.errors import ContextLengthExceededError


def check_request_text(request: InferenceRequest, *, max_prompt_chars: int) -> None:
    """Refuse prompts over ``max_prompt_chars`` characters before any model is invoked."""
    text, param = prompt_text(request)
    if len(text) > max_prompt_chars:
        raise ContextLengthExceededError(
            f"the prompt is {len(text)} characters; this deployment accepts at most {max_prompt_chars}",
            param=param,
        )
