"""Where a function reads its API keys' records: SSM Parameter Store (a deployment) or a file (``snapllm local
serve``), chosen by the function's variables.

    verifier = ApiKeyEnvironment.from_env().verifier()    # None: this function checks no keys
    verifier.verify(headers.get("authorization"))

docs/api-keys.md says why Parameter Store, and how records are cached and lookups bounded.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import Field

from snapllm.api_keys import LOCAL_REALM, ApiKeyVerifier, FileKeyStore, KeyRecord, key_id_of
from snapllm.environment import EnvironmentSettings, Settings

logger = logging.getLogger("snapllm.api_keys")

#: Key records remembered per environment by :class:`SsmKeyStore`; past it the least recently used goes.
MAX_CACHED_KEYS = 1024
#: Ids with no record remembered per environment, apart from the keys: unknown ids never push a key out.
MAX_CACHED_UNKNOWN_IDS = 4096
#: Seconds an id with no record is remembered (a key created meanwhile works after at most this long).
UNKNOWN_ID_CACHE_S = 30.0
#: Parameter Store lookups of ids not remembered, per environment: a burst of this many...
UNKNOWN_ID_LOOKUP_BURST = 20
#: ...then this many a second. Past it an unknown id is refused without a lookup.
UNKNOWN_ID_LOOKUPS_PER_S = 5.0
#: The most one kind of refusal is logged: once per this many seconds, with the count since.
REFUSAL_LOG_EVERY_S = 60.0

Clock = Callable[[], float]


class TokenBucket:
    """``burst`` tokens, refilled at ``rate`` a second: :meth:`take` is False while it is empty."""

    def __init__(self, rate: float, burst: int, clock: Clock = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> bool:
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


class _Expiring:
    """At most ``size`` values, each with its expiry; past ``size`` the least recently used goes, alone."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[str, tuple[float, KeyRecord | None]] = OrderedDict()

    def get(self, name: str) -> tuple[float, KeyRecord | None] | None:
        entry = self._entries.get(name)
        if entry is not None:
            self._entries.move_to_end(name)
        return entry

    def put(self, name: str, expires: float, value: KeyRecord | None) -> None:
        self._entries[name] = (expires, value)
        self._entries.move_to_end(name)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def pop(self, name: str) -> None:
        self._entries.pop(name, None)

    def __len__(self) -> int:
        return len(self._entries)


class _RefusalLog:
    """Log lines about refused keys, each kind at most once per ``every_s`` seconds (a flood of unknown ids
    would otherwise write one line each), with the number seen since the last line."""

    def __init__(self, every_s: float, clock: Clock) -> None:
        self.every_s = every_s
        self.clock = clock
        self._last: dict[str, float] = {}
        self._since: dict[str, int] = {}

    def warning(self, kind: str, message: str, *args: object) -> None:
        now = self.clock()
        self._since[kind] = self._since.get(kind, 0) + 1
        last = self._last.get(kind)
        if last is not None and now - last < self.every_s:
            return
        self._last[kind] = now
        count = self._since.pop(kind)
        logger.warning(message + " (%d such in the last %g s)", *args, count, self.every_s)


class SsmKeyStore:
    """The records in SSM Parameter Store under ``path``, one SecureString per key id.

    A record found is remembered for ``cache_s`` seconds (0: read on every check), an id with none for
    ``unknown_cache_s``, each in a least-recently-used cache of its own, so ids with no key cannot push a
    key's record out. An id remembered in neither is looked up only while the :class:`TokenBucket` has a
    token: past its rate, the id is refused unread. An id whose record has expired is read again without
    a token (only a key that exists has one). No record, an unreadable one, a lookup refused for the rate
    and a lookup that failed (Parameter Store throttling, say) are all refusals, never a 500: the key has
    no candidate and gets a 401, and each kind is logged at most once a minute.
    """

    def __init__(
        self,
        path: str,
        client: Any,
        *,
        cache_s: float = 0.0,
        unknown_cache_s: float = UNKNOWN_ID_CACHE_S,
        max_keys: int = MAX_CACHED_KEYS,
        max_unknown: int = MAX_CACHED_UNKNOWN_IDS,
        lookups_per_s: float = UNKNOWN_ID_LOOKUPS_PER_S,
        lookup_burst: int = UNKNOWN_ID_LOOKUP_BURST,
        clock: Clock = time.monotonic,
    ) -> None:
        self.path = path
        self.client = client
        self.cache_s = cache_s
        self.unknown_cache_s = unknown_cache_s
        self.clock = clock
        self.lookups = TokenBucket(lookups_per_s, lookup_burst, clock)
        self._keys = _Expiring(max_keys)
        self._unknown = _Expiring(max_unknown)
        self._log = _RefusalLog(REFUSAL_LOG_EVERY_S, clock)

    def candidates(self, key: str) -> Sequence[KeyRecord]:
        key_id = key_id_of(key)
        if key_id is None:
            return ()
        record = self._record(key_id)
        return (record,) if record is not None else ()

    def _record(self, key_id: str) -> KeyRecord | None:
        now = self.clock()
        known = self._keys.get(key_id)
        if known is not None and known[0] > now:
            return known[1]
        unknown = self._unknown.get(key_id)
        if unknown is not None and unknown[0] > now:
            return None
        if known is None and not self.lookups.take():
            self._log.warning(
                "rate",
                "API key refused without a lookup: more than %g unknown key ids a second",
                self.lookups.rate,
            )
            return None
        found, record = self._read(key_id)
        if not found:
            return None  # not remembered: the next request may look again, at the bucket's rate
        if record is None:
            self._keys.pop(key_id)
            self._unknown.put(key_id, self.clock() + self.unknown_cache_s, None)
        else:
            self._unknown.pop(key_id)
            self._keys.put(key_id, self.clock() + self.cache_s, record)
        return record

    def _read(self, key_id: str) -> tuple[bool, KeyRecord | None]:
        """``(True, record)``, ``(True, None)`` when there is no (readable) record, ``(False, None)`` when
        Parameter Store could not be asked (throttled, unreachable, denied)."""
        name = f"{self.path}{key_id}"
        try:
            answer = self.client.get_parameter(Name=name, WithDecryption=True)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code == "ParameterNotFound":
                self._log.warning(
                    "missing",
                    "API key refused: no key record %s (a revoked key, another stack's, or none created yet: "
                    "snapllm keys create)",
                    name,
                )
                return True, None
            self._log.warning("failed", "API key refused: reading %s failed: %s", name, code or exc)
            return False, None
        except BotoCoreError as exc:
            self._log.warning("failed", "API key refused: reading %s failed: %s", name, exc)
            return False, None
        try:
            return True, KeyRecord.from_json(answer["Parameter"]["Value"])
        except (ValueError, KeyError, TypeError):
            self._log.warning("unreadable", "API key refused: the key record %s is unreadable", name)
            return True, None


class ApiKeyVariables(Settings):
    """Where a function that checks API keys reads their hashes (``ApiAuth=KEY``)."""

    api_key_parameter_path: str | None = Field(None, json_schema_extra={"unset": "keys not checked"})
    """SSM Parameter Store path of the key hashes (`/snapllm/<stack>/api-keys/`); set, every request needs
    `Authorization: Bearer <key>` of a key stored there."""
    api_keys_file: Path | None = Field(None, json_schema_extra={"unset": "keys not checked"})
    """Local runs (`snapllm local serve --api-key`): a file of key records (one JSON record a line) to check
    keys against instead of Parameter Store; a file with no record stops the function's start."""
    api_key_cache_s: float = Field(300.0, ge=0, le=3600)
    """Seconds a key's record is remembered (0: read on every request); a revoked key stops working within
    this time. An id with no record is remembered 30 s."""


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
