"""Where a function reads its API keys' records: SSM Parameter Store (a deployment) or a file (``snapllm local
serve``), chosen by the function's variables::

    verifier = ApiKeyEnvironment.from_env().verifier()    # None: this function checks no keys
    verifier.verify(headers.get("authorization"))

Parameter Store rather than Secrets Manager: a standard SecureString costs nothing to keep (Secrets Manager
charges per secret and month, so per key), a ``GetParameter`` takes milliseconds, and IAM scopes a role to
a path (``parameter/snapllm/<stack>/api-keys/*``). The AWS managed key ``aws/ssm`` encrypts the values;
the roles need no KMS permission of their own for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import Field

from snapllm.api_keys import LOCAL_REALM, ApiKeyVerifier, FileKeyStore, KeyRecord, key_id_of
from snapllm.environment import EnvironmentSettings, Settings
from snapllm.errors import ServerError

logger = logging.getLogger("snapllm.api_keys")

#: Keys remembered per environment by :class:`SsmKeyStore` (known or not) before it forgets them all.
MAX_CACHED_KEYS = 1024


class SsmKeyStore:
    """The records in SSM Parameter Store under ``path``, one SecureString per key id, each remembered for
    ``cache_s`` seconds (0: read on every check), a key that does not exist included."""

    def __init__(self, path: str, client: Any, *, cache_s: float = 0.0) -> None:
        self.path = path
        self.client = client
        self.cache_s = cache_s
        self._cache: dict[str, tuple[float, KeyRecord | None]] = {}

    def candidates(self, key: str) -> Sequence[KeyRecord]:
        key_id = key_id_of(key)
        if key_id is None:
            return ()
        record = self._record(key_id)
        return (record,) if record is not None else ()

    def _record(self, key_id: str) -> KeyRecord | None:
        now = time.monotonic()
        cached = self._cache.get(key_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        record = self._read(key_id)
        if self.cache_s > 0:
            if len(self._cache) >= MAX_CACHED_KEYS:
                self._cache.clear()
            self._cache[key_id] = (now + self.cache_s, record)
        return record

    def _read(self, key_id: str) -> KeyRecord | None:
        try:
            answer = self.client.get_parameter(Name=f"{self.path}{key_id}", WithDecryption=True)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ParameterNotFound":
                return None
            logger.error("reading an API key record failed", extra={"key_id": key_id, "error": str(exc)})
            raise ServerError("the API key could not be checked; see the function's logs") from None
        except BotoCoreError as exc:
            logger.error("reading an API key record failed", extra={"key_id": key_id, "error": str(exc)})
            raise ServerError("the API key could not be checked; see the function's logs") from None
        try:
            return KeyRecord.from_json(answer["Parameter"]["Value"])
        except (ValueError, KeyError):
            logger.error("an API key record is unreadable", extra={"key_id": key_id})
            return None


class ApiKeyVariables(Settings):
    """Where a function that checks API keys reads their hashes (``ApiAuth=KEY``)."""

    api_key_parameter_path: str | None = Field(None, json_schema_extra={"unset": "keys not checked"})
    """SSM Parameter Store path of the key hashes (`/snapllm/<stack>/api-keys/`); set, every request needs
    `Authorization: Bearer <key>` of a key stored there."""
    api_keys_file: Path | None = Field(None, json_schema_extra={"unset": "keys not checked"})
    """Local runs (`snapllm local serve --api-key`): a file of key records (one JSON record a line) to check
    keys against instead of Parameter Store."""
    api_key_cache_s: float = Field(300.0, ge=0, le=3600)
    """Seconds a key's record, or its absence, is remembered (0: read on every request); a revoked key
    stops working within this time."""


class ApiKeyEnvironment(ApiKeyVariables, EnvironmentSettings):
    """:class:`ApiKeyVariables` from ``SNAPLLM_*`` variables."""

    def verifier(self, *, client: Any = None, cache_s: float | None = None) -> ApiKeyVerifier | None:
        """The check these settings ask for, or None when no key store is set (keys are not checked)."""
        if self.api_keys_file is not None:
            return ApiKeyVerifier(FileKeyStore.read(self.api_keys_file), realm=LOCAL_REALM)
        if not self.api_key_parameter_path:
            return None
        store = SsmKeyStore(
            self.api_key_parameter_path,
            client or boto3.client("ssm"),
            cache_s=self.api_key_cache_s if cache_s is None else cache_s,
        )
        return ApiKeyVerifier(store, realm=self.api_key_parameter_path)
