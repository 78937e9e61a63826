"""The arguments of ``snapllm keys`` (run by :mod:`snapllm_dev.keys.cli`), declared without importing boto3:
a usage error costs no start-up."""

from __future__ import annotations

import argparse


def add_parser(commands: argparse._SubParsersAction) -> None:
    keys = commands.add_parser("keys", help="API keys of a stack deployed with ApiAuth=KEY")
    verbs = keys.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create", help="make a key; it is shown once, only its salted hash is kept")
    listing = verbs.add_parser("list", help="the stack's keys: ids, prefixes and creation dates")
    revoke = verbs.add_parser("revoke", help="delete a key (it stops working within ApiKeyCacheSeconds)")
    revoke.add_argument("key", help="the key's id (from `snapllm keys list`) or the key itself")
    for verb in (create, listing, revoke):
        verb.add_argument("--stack", required=True, help="the stack deployed from this template")
        verb.add_argument("--region", help="AWS region (default: boto3's)")
        verb.set_defaults(implementation="snapllm_dev.keys.cli")
