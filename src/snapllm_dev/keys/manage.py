"""A stack's API keys in SSM Parameter Store: made, listed and deleted (the functions only read them).

    keys = StackKeys("my-stack", boto3.client("ssm"))
    key, record = keys.create()      # the key (shown once) and what is stored: a salted hash

docs/api-keys.md ("Keys") says where they are stored and who may read them.
"""

from __future__ import annotations

import re
from typing import Any

from botocore.exceptions import ClientError

from snapllm.api_keys import KeyRecord, key_id_of, new_key, parameter_path
from snapllm.errors import SnapllmError

KEY_ID = re.compile(r"[0-9a-f]{12}")


class KeyNotFoundError(SnapllmError):
    """The stack has no key with that id (never made, or revoked already)."""


class StackKeys:
    """The keys of the stack ``stack`` (any name; the stack need not exist yet)."""

    def __init__(self, stack: str, ssm: Any) -> None:
        self.stack = stack
        self.path = parameter_path(stack)
        self.ssm = ssm

    def create(self) -> tuple[str, KeyRecord]:
        """A new key, stored as its record (the key's hash under the stack's realm): the key is returned,
        never stored."""
        key, record = new_key(realm=self.path)
        self.ssm.put_parameter(
            Name=f"{self.path}{record.key_id}",
            Description=f"snapllm API key {record.key_id}: salted SHA-256 (the key is not stored)",
            Value=record.to_json(),
            Type="SecureString",
            Overwrite=False,
        )
        return key, record

    def list(self) -> list[KeyRecord]:
        """The stack's keys, oldest first."""
        records = []
        for page in self.ssm.get_paginator("get_parameters_by_path").paginate(
            Path=self.path, Recursive=False, WithDecryption=True
        ):
            for parameter in page.get("Parameters", []):
                try:
                    records.append(KeyRecord.from_json(parameter["Value"]))
                except ValueError:
                    continue  # not a key record (nothing of this tool's)
        return sorted(records, key=lambda record: (record.created, record.key_id))

    def revoke(self, key: str) -> str:
        """Delete the key with id (or the key) ``key``; its id. KeyNotFoundError if there is none."""
        key_id = key_id_of(key) or key
        if not KEY_ID.fullmatch(key_id):
            raise KeyNotFoundError(f"{key_id!r} is not a key id (12 hex digits, see `snapllm keys list`)")
        try:
            self.ssm.delete_parameter(Name=f"{self.path}{key_id}")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("ParameterNotFound", "ValidationException"):
                raise KeyNotFoundError(f"the stack {self.stack!r} has no key {key_id!r}") from None
            raise
        return key_id


def stack_auth(cloudformation: Any, stack: str) -> str | None:
    """The stack's ``ApiAuth`` (None when the stack cannot be read or has no such parameter)."""
    try:
        described = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]
    except (ClientError, IndexError, KeyError):
        return None
    for parameter in described.get("Parameters") or []:
        if parameter.get("ParameterKey") == "ApiAuth":
            return str(parameter.get("ParameterValue"))
    return None
