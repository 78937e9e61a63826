"""The HTTP API's Lambda authorizer (``ApiAuth=KEY``): checks ``Authorization: Bearer <key>`` against the key
hashes in SSM Parameter Store::

    authorizer = KeyAuthorizer.from_env()    # SNAPLLM_API_KEY_PARAMETER_PATH
    handler = authorizer.handle              # functions/authorizer/app.py

It lets every request through with its verdict in the context, and the router answers an invalid key with
OpenAI's 401 (:func:`snapllm.api_keys.authorizer_verdict`). docs/api-keys.md says why, and what a flood of
made-up keys costs.
"""

from __future__ import annotations

import logging
from typing import Any

from snapllm.api_keys import VALID, VERDICT, ApiKeyVerifier
from snapllm.api_keys.store import ApiKeyEnvironment
from snapllm.errors import ConfigurationError, InvalidApiKeyError

logger = logging.getLogger("snapllm.authorizer")


class KeyAuthorizer:
    """The verdict on one HTTP API request's key, for API Gateway."""

    def __init__(self, verifier: ApiKeyVerifier) -> None:
        self.verifier = verifier

    @classmethod
    def from_env(cls) -> KeyAuthorizer:
        """The authorizer over the key store of the environment's variables; API Gateway caches its
        answers, so a key's record is read on every invoke (an unknown id's absence is remembered)."""
        verifier = ApiKeyEnvironment.from_env().verifier(cache_s=0.0)
        if verifier is None:
            raise ConfigurationError(
                "the authorizer needs SNAPLLM_API_KEY_PARAMETER_PATH (or SNAPLLM_API_KEYS_FILE)"
            )
        return cls(verifier)

    def handle(self, event: dict[str, Any], context: Any = None) -> dict[str, Any]:
        """Answer one authorizer event (payload 2.0: ``headers`` lower-cased, repeated ones comma-joined)."""
        headers = event.get("headers") if isinstance(event, dict) else None
        authorization = headers.get("authorization") if isinstance(headers, dict) else None
        try:
            record = self.verifier.verify(authorization)
        except InvalidApiKeyError as refused:
            logger.info("API key refused: %s", refused.message)
            return {"isAuthorized": True, "context": {VERDICT: "invalid", "message": refused.message}}
        return {"isAuthorized": True, "context": {VERDICT: VALID, "key_id": record.key_id}}
