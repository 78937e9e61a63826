"""Checks on a parsed request that need no model: prompt size and text that UTF-8 can carry.

check_request_text(request, max_prompt_chars=32_000)   # prompt size; text UTF-8 can carry
"""

from __future__ import annotations

from snapllm.contract import InferenceRequest, check_encodable, prompt_text
from snapllm.errors import ContextLengthExceededError


def check_request_text(request: InferenceRequest, *, max_prompt_chars: int) -> None:
    """Refuse prompts over ``max_prompt_chars`` and text (prompt, stop sequences) UTF-8 cannot encode."""
    text, param = prompt_text(request)
    if len(text) > max_prompt_chars:
        raise ContextLengthExceededError(
            f"the prompt is {len(text)} characters; this deployment accepts at most {max_prompt_chars}",
            param=param,
        )
    check_encodable(request)
