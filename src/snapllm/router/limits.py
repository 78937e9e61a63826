"""Checks on a parsed request that need no model: prompt size and text that UTF-8 can carry.

text, param = prompt_text(request)       # all message texts (chat) or the prompt
check_encodable(text, param=param)       # JSON may carry lone surrogates ("\\ud800"); UTF-8 cannot
"""

from __future__ import annotations

from snapllm.contract import ChatCompletionRequest, InferenceRequest
from snapllm.errors import ContextLengthExceededError, InvalidRequestError


def prompt_text(request: InferenceRequest) -> tuple[str, str]:
    """The text the model will read and the field it came from (``messages`` or ``prompt``)."""
    if isinstance(request, ChatCompletionRequest):
        return "".join(message.text() for message in request.messages), "messages"
    return request.text, "prompt"


def check_encodable(text: str, *, param: str) -> None:
    """Refuse text with lone surrogates: valid JSON, but the tokenizer needs UTF-8 and would fail later."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequestError(
            f"{param} contains an unpaired surrogate (\\ud800-\\udfff), which is not valid Unicode text",
            param=param,
        ) from None


def check_request_text(request: InferenceRequest, *, max_prompt_chars: int) -> None:
    """Refuse prompts over ``max_prompt_chars`` and text (prompt, stop sequences) UTF-8 cannot encode."""
    text, param = prompt_text(request)
    if len(text) > max_prompt_chars:
        raise ContextLengthExceededError(
            f"the prompt is {len(text)} characters; this deployment accepts at most {max_prompt_chars}",
            param=param,
        )
    check_encodable(text, param=param)
    for stop in request.stop or []:
        check_encodable(stop, param="stop")
