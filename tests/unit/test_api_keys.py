"""The key check itself (:mod:`snapllm.api_keys`): the header's form, the records, the realm, a keys file."""

from __future__ import annotations

import pytest

from snapllm.api_keys import (
    INCORRECT,
    LOCAL_REALM,
    MALFORMED,
    MISSING,
    ApiKeyVerifier,
    FileKeyStore,
    KeyRecord,
    bearer_key,
    key_id_of,
    local_store,
    new_key,
    parameter_path,
)
from snapllm.api_keys.store import ApiKeyEnvironment
from snapllm.errors import ConfigurationError, InvalidApiKeyError


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (None, MISSING),
        ("", MISSING),
        ("   ", MISSING),
        ("Bearer", MISSING),
        ("Bearer    ", MISSING),
        ("Basic abc", MALFORMED),
        ("sk-abc", MALFORMED),
        ("Bearer a b", MALFORMED),
        ("Bearer a,Bearer a", MALFORMED),
        ("Bearer ключ", MALFORMED),
        ("Bearer a\x00b", MALFORMED),
        ("Bearer " + "a" * 600, MALFORMED),
        (b"Bearer abc", MALFORMED),
    ],
)
def test_a_header_without_one_well_formed_bearer_key_is_refused_by_name(header, message):
    with pytest.raises(InvalidApiKeyError) as refused:
        bearer_key(header)
    assert refused.value.message == message and refused.value.status_code == 401


def test_the_scheme_is_case_insensitive_and_the_token_kept_as_sent():
    assert bearer_key("bearer sk-A_b.c~d+e/f==") == "sk-A_b.c~d+e/f=="
    assert bearer_key("BEARER  sk-x ") == "sk-x"


def test_a_created_key_names_its_record_and_verifies_only_in_its_realm():
    key, record = new_key(realm=parameter_path("a"))
    assert key_id_of(key) == record.key_id and key_id_of(key + "x") is None and key_id_of("sk-x") is None
    assert KeyRecord.from_json(record.to_json()) == record and key not in record.to_json()
    store = FileKeyStore([record])
    assert ApiKeyVerifier(store, realm=parameter_path("a")).verify(f"Bearer {key}") == record
    with pytest.raises(InvalidApiKeyError, match=INCORRECT):
        ApiKeyVerifier(store, realm=parameter_path("b")).verify(f"Bearer {key}")
    with pytest.raises(InvalidApiKeyError, match=INCORRECT):  # no record at all: the stand-in is compared
        ApiKeyVerifier(FileKeyStore([]), realm=LOCAL_REALM).verify(f"Bearer {key}")


def test_a_keys_file_round_trips_and_a_bad_one_is_named(tmp_path):
    path = tmp_path / "keys.jsonl"
    local_store(["sk-one", "sk-two"]).write(path)
    assert path.stat().st_mode & 0o077 == 0  # its owner's only
    verifier = ApiKeyVerifier(FileKeyStore.read(path), realm=LOCAL_REALM)
    assert verifier.verify("Bearer sk-two").prefix == "sk-two..."
    path.write_text('{"v": 2}\n')
    with pytest.raises(ConfigurationError, match=r"keys\.jsonl"):
        FileKeyStore.read(path)


@pytest.mark.parametrize("text", ["", "\n\n  \n", "# keys\n\n"], ids=["empty", "blank-lines", "comments"])
def test_a_records_file_with_no_record_stops_the_start_instead_of_checking_nothing(tmp_path, text):
    path = tmp_path / "keys.jsonl"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=r"keys\.jsonl"):
        FileKeyStore.read(path)
    with pytest.raises(ConfigurationError, match=r"keys\.jsonl"):  # what a function reads at init
        ApiKeyEnvironment.from_env({"SNAPLLM_API_KEYS_FILE": str(path)}).verifier()


@pytest.mark.parametrize("stack", ["", "1abc", "a/b", "a b", "a" * 129])
def test_a_parameter_path_needs_a_stack_name(stack):
    with pytest.raises(ConfigurationError):
        parameter_path(stack)
