"""The ``VersionDigests`` custom resource: one short digest per function of everything its version runs.

SAM names a function's ``AWS::Lambda::Version`` after the function's own code folder and its properties
as written, so a change that lives only in a layer or in a parameter value leaves the version as it was
and the ``live`` alias on the old code. An ``AWS::Lambda::Version`` whose ``Description`` changes is
replaced, which publishes a new version; a description holds at most 256 characters, and CloudFormation
has no hash function. So ``template.yaml`` hands this resource, per function, the values its version
captures (layer ARNs, architecture, memory, timeout, every environment value), resolved by
CloudFormation, and each version's description is ``!GetAtt VersionDigests.<Function>``::

    VersionDescription: !Sub "config sha256 ${VersionDigests.InferenceFunction}"

Properties: any number of ``<Name>: <value>`` (strings, lists, mappings as CloudFormation passes them).
Data: ``<Name>``: the SHA-256 (64 hex digits) of the value's canonical JSON. A value that did not change
keeps its digest, so only the versions of functions whose inputs changed are replaced. Delete does
nothing (there is nothing to remove). The physical ID stays ``version-digests``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from snapllm.errors import ConfigurationError, CustomResourceResponseError

logger = logging.getLogger("snapllm.deploy")

PHYSICAL_ID = "version-digests"
SUCCESS, FAILED = "SUCCESS", "FAILED"
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


def put_response(url: str, body: Mapping[str, Any], *, attempts: int = 3, timeout_s: float = 10.0) -> None:
    """PUT ``body`` to CloudFormation's pre-signed response ``url``; retries connection failures and 5xx.

    This function imports nothing but the standard library: ``snapllm deploy-check`` reads a function's
    imports to list the AWS calls its role must allow, and this one makes none.

    Raises:
        CustomResourceResponseError: A 4xx (an expired URL), or every attempt failed.
    """
    data = json.dumps(body).encode()
    last: object = None
    for attempt in range(attempts):
        if attempt:
            time.sleep(attempt)
        # The URL is signed without a content type: send an empty one (urllib would add a form type).
        request = urllib.request.Request(url, data=data, method="PUT", headers={"Content-Type": ""})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                response.read()
                return
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code < 500:
                raise CustomResourceResponseError(
                    f"the response URL refused the response: {exc.code}"
                ) from None
            last = exc.code
        except OSError as exc:
            last = exc
    raise CustomResourceResponseError(f"cannot deliver the response after {attempts} attempts: {last}")


class VersionDigestResource:
    """Answers CloudFormation's requests for the ``VersionDigests`` resource (module docstring)."""

    def __init__(self, send: Callable[[str, Mapping[str, Any]], None] = put_response) -> None:
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
        self.send(str(event["ResponseURL"]), body)
        return body
