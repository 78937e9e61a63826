"""API keys (``ApiAuth=KEY``): what a key looks like, how it is stored, and the one check every front door
makes of an ``Authorization: Bearer <key>`` header::

    verifier = ApiKeyEnvironment.from_env().verifier()       # snapllm.api_keys.store: SSM, or a file
    record = verifier.verify(headers.get("authorization"))   # or InvalidApiKeyError (401)

A key is ``sk-snapllm-<id>-<secret>``; a deployment keeps a salted hash of each, one SecureString per key
under ``/snapllm/<stack>/api-keys/<id>``. docs/api-keys.md says how keys are hashed and compared. This
module calls no AWS API (:mod:`snapllm.api_keys.store` reads Parameter Store).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from snapllm.errors import ConfigurationError, InvalidApiKeyError

KEY_PREFIX = "sk-snapllm-"
#: The longest ``Authorization`` header read at all: a created key's header is 73 characters.
MAX_AUTHORIZATION_CHARS = 512
#: The realm of ``snapllm local serve``'s keys.
LOCAL_REALM = "local"
#: The authorizer's verdict, in the context it hands API Gateway (the router reads it there).
VERDICT = "snapllm_api_key"
VALID = "valid"

_KEY_ID = re.compile(r"[0-9a-f]{12}")
_SECRET = re.compile(r"[A-Za-z0-9_-]{43}")
# RFC 6750's b64token: what a bearer token may contain.
_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_STACK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,127}")

_RECORD_FIELDS = ("key_id", "salt", "sha256", "created", "prefix")

MISSING = "no API key: send it as the header 'Authorization: Bearer <key>'"
MALFORMED = "the Authorization header must be 'Bearer <key>' (one header, one key)"
INCORRECT = "Incorrect API key provided"


def parameter_path(stack: str) -> str:
    """The SSM path under which the stack ``stack`` keeps its key hashes (the template's, too)."""
    if not _STACK_NAME.fullmatch(stack):
        raise ConfigurationError(f"{stack!r} is not a CloudFormation stack name")
    return f"/snapllm/{stack}/api-keys/"


@dataclass(frozen=True)
class KeyRecord:
    """What is stored of one key: never the key itself."""

    key_id: str
    salt: str  # base64url, 16 random bytes
    sha256: str  # hex digest of salt, realm and key
    created: str  # ISO 8601, UTC
    prefix: str  # what a person may see of the key: "sk-snapllm-<id>-..."

    def to_json(self) -> str:
        return json.dumps({"v": 1, **asdict(self)}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> KeyRecord:
        """A stored record; ValueError when it is not one."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("v") != 1:
            raise ValueError("not a snapllm key record (version 1)")
        try:
            return cls(**{name: str(data[name]) for name in _RECORD_FIELDS})
        except KeyError as exc:
            raise ValueError(f"a key record without {exc}") from None


def key_hash(key: str, *, salt: str, realm: str) -> str:
    """The hex SHA-256 stored for ``key`` (see the module's docstring)."""
    parts = (salt.encode(), realm.encode(), key.encode("utf-8", "surrogatepass"))
    return hashlib.sha256(b"\0".join(parts)).hexdigest()


def new_salt() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")


def record_for(key: str, *, key_id: str, realm: str, prefix: str | None = None) -> KeyRecord:
    """The record to store for ``key`` (created now)."""
    salt = new_salt()
    return KeyRecord(
        key_id=key_id,
        salt=salt,
        sha256=key_hash(key, salt=salt, realm=realm),
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        prefix=prefix or f"{KEY_PREFIX}{key_id}-...",
    )


def new_key(realm: str) -> tuple[str, KeyRecord]:
    """A new random key and its record: the key is shown once and never stored."""
    key_id = secrets.token_hex(6)
    key = f"{KEY_PREFIX}{key_id}-{base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip('=')}"
    return key, record_for(key, key_id=key_id, realm=realm)


def key_id_of(key: str) -> str | None:
    """The id in a key of this project's form, else None."""
    if not key.startswith(KEY_PREFIX):
        return None
    key_id, _, secret = key.removeprefix(KEY_PREFIX).partition("-")
    return key_id if _KEY_ID.fullmatch(key_id) and _SECRET.fullmatch(secret) else None


def bearer_key(authorization: object) -> str:
    """The key in an ``Authorization`` header value (the scheme is case-insensitive, RFC 7235).

    Raises :class:`InvalidApiKeyError` for no header, a header of another scheme or form, an empty key,
    a value over :data:`MAX_AUTHORIZATION_CHARS` or with characters a bearer token cannot have (repeated
    headers arrive joined by commas, which a token cannot contain either)."""
    if authorization is None or (isinstance(authorization, str) and not authorization.strip()):
        raise InvalidApiKeyError(MISSING)
    if not isinstance(authorization, str) or len(authorization) > MAX_AUTHORIZATION_CHARS:
        raise InvalidApiKeyError(MALFORMED)
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise InvalidApiKeyError(MALFORMED)
    token = token.strip(" ")
    if not token:
        raise InvalidApiKeyError(MISSING)
    if not _TOKEN.fullmatch(token):
        raise InvalidApiKeyError(MALFORMED)
    return token


class KeyStore(Protocol):
    """Where the records of a deployment's keys are read from."""

    def candidates(self, key: str) -> Sequence[KeyRecord]:
        """The records ``key`` may match (an empty sequence: none)."""
        ...


# Compared against when no record could match, so that an unknown key costs what a wrong one does.
_STAND_IN = KeyRecord(key_id="0" * 12, salt=new_salt(), sha256="0" * 64, created="", prefix="")


class ApiKeyVerifier:
    """The check of an ``Authorization`` header against the keys in ``store``, under ``realm``."""

    def __init__(self, store: KeyStore, *, realm: str) -> None:
        self.store = store
        self.realm = realm

    def verify(self, authorization: object) -> KeyRecord:
        """The record of the key in ``authorization``, or :class:`InvalidApiKeyError`."""
        key = bearer_key(authorization)
        matched: KeyRecord | None = None
        for record in self.store.candidates(key) or (_STAND_IN,):
            # Every candidate is compared, whatever the earlier ones gave.
            if hmac.compare_digest(record.sha256, key_hash(key, salt=record.salt, realm=self.realm)):
                matched = record
        if matched is None or matched is _STAND_IN:
            raise InvalidApiKeyError(INCORRECT)
        return matched


class FileKeyStore:
    """Records kept in a file, one JSON record a line (``snapllm local serve --api-key``): every record is a
    candidate, since a local key may have any form."""

    def __init__(self, records: Sequence[KeyRecord]) -> None:
        self.records = tuple(records)

    @classmethod
    def read(cls, path: Path) -> FileKeyStore:
        """The records in ``path``; ConfigurationError when it cannot be read or holds none: a file of keys
        asked for and none found fails closed, never as "no check"."""
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
            records = [KeyRecord.from_json(line) for line in lines if line.strip()]
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"API keys file {path}: {exc}") from None
        if not records:
            raise ConfigurationError(f"API keys file {path} holds no key record")
        return cls(records)

    def write(self, path: Path) -> None:
        """Write the records to ``path``, readable by its owner only."""
        path.touch(mode=0o600)
        path.write_text("".join(record.to_json() + "\n" for record in self.records), encoding="utf-8")

    def candidates(self, key: str) -> Sequence[KeyRecord]:
        return self.records


def local_store(keys: Sequence[str]) -> FileKeyStore:
    """The records of plain keys given to ``snapllm local serve`` (hashed in the local realm)."""
    return FileKeyStore(
        [record_for(key, key_id=f"local{index:07d}", realm=LOCAL_REALM, prefix=key[:6] + "...")
         for index, key in enumerate(keys)]
    )  # fmt: skip


def authorizer_verdict(authorizer: Mapping[str, Any] | None) -> None:
    """Raise :class:`InvalidApiKeyError` unless the Lambda authorizer's context (``requestContext.authorizer
    .lambda`` of an HTTP API event) says the key was valid; a request without one is refused."""
    context = authorizer if isinstance(authorizer, Mapping) else {}
    if context.get(VERDICT) != VALID:
        message = context.get("message")
        raise InvalidApiKeyError(message if message in (MISSING, MALFORMED, INCORRECT) else INCORRECT)
