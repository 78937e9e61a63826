"""The deployed key check under load (:class:`snapllm.api_keys.store.SsmKeyStore`): made-up key ids cost a
bounded number of Parameter Store lookups, never push a key's record out of the cache, and a throttled or
failed lookup is a 401, never a 500; the authorizer gets the same bounds.

:class:`FakeSsm` stands in for SSM Parameter Store: AWS cannot be reached from the tests, and moto's SSM
cannot be made to throttle on demand. It answers ``GetParameter`` as SSM does (the record's JSON, or
botocore's ``ClientError`` with SSM's error codes) and counts the calls.
"""

from __future__ import annotations

import base64
import logging
import secrets
import time

import pytest
from botocore.exceptions import ClientError

from snapllm.api_keys import INCORRECT, KEY_PREFIX, ApiKeyVerifier, new_key, parameter_path
from snapllm.api_keys.store import (
    REFUSAL_LOG_EVERY_S,
    UNKNOWN_ID_CACHE_S,
    UNKNOWN_ID_LOOKUP_BURST,
    UNKNOWN_ID_LOOKUPS_PER_S,
    ApiKeyEnvironment,
    SsmKeyStore,
)
from snapllm.authorizer import KeyAuthorizer
from snapllm.errors import InvalidApiKeyError

PATH = parameter_path("snapllm-flood")


class FakeSsm:
    """SSM Parameter Store's ``GetParameter`` over a dict (see the module's docstring)."""

    def __init__(self) -> None:
        self.parameters: dict[str, str] = {}
        self.calls = 0
        self.throttling = False

    def get_parameter(self, *, Name: str, WithDecryption: bool) -> dict:
        self.calls += 1
        if self.throttling:
            error = {"Code": "ThrottlingException", "Message": "Rate exceeded"}
            raise ClientError({"Error": error}, "GetParameter")
        if Name not in self.parameters:
            raise ClientError({"Error": {"Code": "ParameterNotFound", "Message": ""}}, "GetParameter")
        return {"Parameter": {"Name": Name, "Type": "SecureString", "Value": self.parameters[Name]}}

    def create_key(self) -> tuple[str, str]:
        """A key stored as ``snapllm keys create`` stores it: the key and its id."""
        key, record = new_key(realm=PATH)
        self.parameters[f"{PATH}{record.key_id}"] = record.to_json()
        return key, record.key_id


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def made_up_key() -> str:
    """A well-formed key of an id no stack has (random, as an attacker would send)."""
    secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    return f"{KEY_PREFIX}{secrets.token_hex(6)}-{secret}"


def refused(verifier: ApiKeyVerifier, key: str) -> InvalidApiKeyError:
    with pytest.raises(InvalidApiKeyError) as refusal:
        verifier.verify(f"Bearer {key}")
    return refusal.value


def test_ten_thousand_made_up_keys_cost_bounded_lookups_and_a_key_stays_cached():
    ssm, clock = FakeSsm(), FakeClock()
    key, key_id = ssm.create_key()
    verifier = ApiKeyVerifier(SsmKeyStore(PATH, ssm, cache_s=300.0, clock=clock), realm=PATH)
    assert verifier.verify(f"Bearer {key}").key_id == key_id and ssm.calls == 1
    for _ in range(10_000):
        clock.now += 0.001  # 10,000 requests in 10 s
        refusal = refused(verifier, made_up_key())
        assert refusal.status_code == 401 and refusal.message == INCORRECT
    lookups = ssm.calls - 1
    assert lookups <= UNKNOWN_ID_LOOKUP_BURST + UNKNOWN_ID_LOOKUPS_PER_S * 10 + 1, lookups
    # The key is still answered from the cache: no lookup.
    calls = ssm.calls
    assert verifier.verify(f"Bearer {key}").key_id == key_id and ssm.calls == calls


def test_a_throttled_lookup_is_a_401_and_a_cached_key_still_works():
    ssm, clock = FakeSsm(), FakeClock()
    key, key_id = ssm.create_key()
    verifier = ApiKeyVerifier(SsmKeyStore(PATH, ssm, cache_s=300.0, clock=clock), realm=PATH)
    verifier.verify(f"Bearer {key}")
    ssm.throttling = True
    for _ in range(1_000):
        clock.now += 0.01
        assert refused(verifier, made_up_key()).status_code == 401
    assert verifier.verify(f"Bearer {key}").key_id == key_id
    # A key not cached in this environment, while Parameter Store throttles: a 401, not a 500.
    other, _ = ssm.create_key()
    clock.now += 1.0
    assert refused(verifier, other).message == INCORRECT
    ssm.throttling = False  # a failed lookup is not remembered: the next request reads again
    clock.now += 1.0
    assert verifier.verify(f"Bearer {other}")


def test_ids_with_no_key_are_remembered_briefly_and_the_least_recent_key_goes_alone():
    ssm, clock = FakeSsm(), FakeClock()
    keys = [ssm.create_key()[0] for _ in range(3)]
    store = SsmKeyStore(PATH, ssm, cache_s=300.0, max_keys=2, clock=clock)
    verifier = ApiKeyVerifier(store, realm=PATH)
    unknown = made_up_key()
    refused(verifier, unknown)
    refused(verifier, unknown)
    assert ssm.calls == 1
    clock.now += UNKNOWN_ID_CACHE_S + 0.1
    refused(verifier, unknown)
    assert ssm.calls == 2
    for key in (keys[0], keys[1], keys[0], keys[2]):  # keys[1] is then the least recently used
        verifier.verify(f"Bearer {key}")
    assert ssm.calls == 5
    verifier.verify(f"Bearer {keys[0]}")
    verifier.verify(f"Bearer {keys[2]}")
    assert ssm.calls == 5
    verifier.verify(f"Bearer {keys[1]}")
    assert ssm.calls == 6


def test_a_stack_with_no_key_refuses_everyone_and_says_why_once_a_minute(caplog):
    ssm, clock = FakeSsm(), FakeClock()
    verifier = ApiKeyVerifier(SsmKeyStore(PATH, ssm, cache_s=300.0, clock=clock), realm=PATH)
    with caplog.at_level(logging.WARNING, logger="snapllm.api_keys"):
        for _ in range(10):
            clock.now += 1.0
            assert refused(verifier, made_up_key()).status_code == 401
        clock.now += REFUSAL_LOG_EVERY_S
        refused(verifier, made_up_key())
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2, lines
    assert all(f"no key record {PATH}" in line and "snapllm keys create" in line for line in lines)
    assert "(1 such in the last 60 s)" in lines[0] and "(10 such in the last 60 s)" in lines[1]


def test_the_authorizer_remembers_unknown_ids_and_bounds_its_lookups():
    ssm = FakeSsm()
    key, key_id = ssm.create_key()
    environment = ApiKeyEnvironment.from_env({"SNAPLLM_API_KEY_PARAMETER_PATH": PATH})
    authorizer = KeyAuthorizer(environment.verifier(client=ssm, cache_s=0.0))

    def verdict(key: str) -> str:
        return authorizer.handle({"headers": {"authorization": f"Bearer {key}"}})["context"][
            "snapllm_api_key"
        ]

    unknown = made_up_key()
    assert verdict(unknown) == verdict(unknown) == "invalid" and ssm.calls == 1
    # A key's record is read on every invoke (API Gateway caches the verdicts): a revoked key stops at once.
    assert verdict(key) == verdict(key) == "valid" and ssm.calls == 3
    started, calls = time.monotonic(), ssm.calls
    assert all(verdict(made_up_key()) == "invalid" for _ in range(500))
    elapsed = time.monotonic() - started
    assert ssm.calls - calls <= UNKNOWN_ID_LOOKUP_BURST + UNKNOWN_ID_LOOKUPS_PER_S * elapsed + 1
    ssm.throttling = True
    assert verdict(made_up_key()) == "invalid"
    del ssm.parameters[f"{PATH}{key_id}"]
    ssm.throttling = False
    assert verdict(key) == "invalid"
