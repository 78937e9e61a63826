"""The ``VersionDigests`` custom resource: one short digest per function of everything its version runs.

Properties: any number of ``<Name>: <value>`` (strings, lists, mappings as CloudFormation passes them).
Data: ``<Name>``: the SHA-256 (64 hex digits) of the value's canonical JSON. Each function's
``VersionDescription`` is ``config sha256 ${VersionDigests.<Function>}``, so a function's version is
replaced exactly when something it runs changed, a layer or a parameter value included: docs/redeploys.md
says why SAM needs this. Delete does nothing; the physical ID stays ``version-digests``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from snapllm.deploy.cfn_response import (
    FAILED,
    RESPONSE_RESERVE_S,
    SUCCESS,
    ResponseSender,
    deadline_from,
    send_response,
)
from snapllm.errors import ConfigurationError

logger = logging.getLogger("snapllm.deploy")

PHYSICAL_ID = "version-digests"
#: The request fields the response echoes back (CloudFormation's custom resource request).
_ECHOED = ("StackId", "RequestId", "LogicalResourceId")
#: Properties CloudFormation itself reads (the function to call, how long to wait), not values to digest.
SERVICE_PROPERTIES = frozenset({"ServiceToken", "ServiceTimeout"})


def digest(value: Any) -> str:
    """SHA-256 of ``value``'s canonical JSON (sorted keys, no spaces): equal values, equal digests."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def digests(properties: Mapping[str, Any]) -> dict[str, str]:
    """The ``Data`` of the resource: each property's digest, CloudFormation's own properties left out."""
    return {name: digest(value) for name, value in properties.items() if name not in SERVICE_PROPERTIES}


class VersionDigestResource:
    """Answers CloudFormation's requests for the ``VersionDigests`` resource (module docstring)."""

    def __init__(self, send: ResponseSender = send_response) -> None:
        self.send = send

    def handle(self, event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
        """Answer ``event``, send the response to CloudFormation and return it.

        Raises:
            ConfigurationError: ``event`` is not a custom resource request (there is no one to answer).
            CustomResourceResponseError: The response could not be delivered.
        """
        missing = [name for name in ("RequestType", "ResponseURL", *_ECHOED) if name not in event]
        if missing:
            raise ConfigurationError(f"not a CloudFormation custom resource request: no {', '.join(missing)}")
        data: dict[str, str] = {}
        status, reason = SUCCESS, "success"
        if event["RequestType"] != "Delete":
            try:
                data = digests(event.get("ResourceProperties") or {})
            except (TypeError, ValueError) as exc:  # a value JSON cannot hold: nothing CloudFormation sends
                status, reason = FAILED, f"cannot digest the properties: {exc}"
        body = {
            "Status": status,
            "Reason": reason,
            "PhysicalResourceId": PHYSICAL_ID,
            **{name: event[name] for name in _ECHOED},
            "NoEcho": False,
            "Data": data,
        }
        logger.info("response", extra={"request_type": event["RequestType"], "status": status, "data": data})
        self.send(str(event["ResponseURL"]), body, deadline=deadline_from(context, RESPONSE_RESERVE_S))
        return body
