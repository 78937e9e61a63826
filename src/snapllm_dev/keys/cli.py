"""``snapllm keys``: see :mod:`snapllm_dev.keys.manage`.

snapllm keys create --stack snapllm       # prints the key once
snapllm keys list --stack snapllm         # id, prefix, created (never a key)
snapllm keys revoke 0a1b2c3d4e5f --stack snapllm

Exits 1 when AWS refuses or the key does not exist, 2 on unusable arguments or AWS configuration. The AWS
credentials and region are boto3's (environment, profile).
"""

from __future__ import annotations

import argparse
import sys

from botocore.exceptions import BotoCoreError, ClientError

from snapllm.api_keys import parameter_path
from snapllm.aws_auth import session_with_credentials
from snapllm.errors import ConfigurationError
from snapllm_dev.keys.manage import KeyNotFoundError, StackKeys, stack_auth

#: How long a revoked key may still work: the template's ApiKeyCacheSeconds default.
CACHE_NOTE = "within the stack's ApiKeyCacheSeconds (300 s unless set)"


def run(args: argparse.Namespace) -> int:
    try:
        parameter_path(args.stack)  # a name no stack can have stops before AWS is asked anything
        session = session_with_credentials(args.region)
        keys = StackKeys(args.stack, session.client("ssm"))
    except (ConfigurationError, BotoCoreError) as exc:
        print(f"snapllm keys: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    try:
        if args.verb == "create":
            key, record = keys.create()
            print(key)
            print(
                f"key {record.key_id} of stack {args.stack!r}: shown once, only its salted hash is kept "
                f"({keys.path}{record.key_id}). Use it as the OpenAI client's api_key.",
                file=sys.stderr,
            )
            auth = stack_auth(session.client("cloudformation"), args.stack)
            if auth != "KEY":
                state = f"uses ApiAuth={auth}" if auth else "could not be read"
                print(
                    f"note: the stack {args.stack!r} {state}; keys work once it is deployed with ApiAuth=KEY "
                    "(sam deploy --parameter-overrides ApiAuth=KEY)",
                    file=sys.stderr,
                )
        elif args.verb == "list":
            records = keys.list()
            print(f"{'id':<14}{'key':<32}created")
            for record in records:
                print(f"{record.key_id:<14}{record.prefix:<32}{record.created}")
            print(f"{len(records)} key(s) under {keys.path}", file=sys.stderr)
        else:
            key_id = keys.revoke(args.key)
            print(f"revoked key {key_id} of stack {args.stack!r}; it stops working {CACHE_NOTE}")
    except KeyNotFoundError as exc:
        print(f"snapllm keys: {exc}", file=sys.stderr)
        return 1
    except (ClientError, BotoCoreError) as exc:
        print(f"snapllm keys: AWS refused: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    return 0
