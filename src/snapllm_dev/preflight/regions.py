"""Where the Lambda features this project needs exist, from the sources cited below (checked 2026-11-25).

    problems = region_problems(function, "ap-south-2")   # ["Function URLs are not offered in ap-south-2 ..."]
    region_of(Path("samconfig.toml"))                     # "us-east-2" (the [default] environment's region)

A feature either lists the regions known to have it (``only``) or the commercial regions known to lack it
(``lacking``); a region the table does not know to have a feature is refused, with the source to check:
a newer source that adds the region belongs in this table, not in an override.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapllm_dev import sam

CHECKED = "2026-11-25"
#: The region samconfig.toml names for every environment: all four features below are offered there.
RECOMMENDED_REGION = "us-east-2"
#: Partitions other than the commercial one (China, GovCloud, the isolated and sovereign ones).
_OTHER_PARTITION_PREFIXES = ("cn-", "us-gov-", "us-iso", "eusc-")
#: The account that publishes Lambda Web Adapter's layers in the commercial regions.
LWA_LAYER_ACCOUNT = "753240598075"


@dataclass(frozen=True)
class RegionalFeature:
    """A Lambda feature and the regions that offer it, with the source of that list."""

    name: str
    source: str
    #: The regions known to offer it; None: every commercial region except ``lacking``.
    only: frozenset[str] | None = None
    lacking: frozenset[str] = frozenset()

    def offered_in(self, region: str) -> bool:
        if self.only is not None:
            return region in self.only
        return not region.startswith(_OTHER_PARTITION_PREFIXES) and region not in self.lacking


DURABLE = RegionalFeature(
    "durable functions",
    "AWS's launch of Lambda durable functions in a limited set of regions, us-east-2 first; Lambda's "
    f"durable functions page lists the current ones (checked {CHECKED})",
    only=frozenset({"us-east-2"}),
)
SNAPSTART = RegionalFeature(
    "SnapStart",
    "AWS Lambda Developer Guide, 'Improving startup performance with Lambda SnapStart': every commercial "
    f"region except Asia Pacific (New Zealand) and Asia Pacific (Taipei) (checked {CHECKED})",
    lacking=frozenset({"ap-southeast-6", "ap-east-2"}),
)
FUNCTION_URLS = RegionalFeature(
    "Function URLs",
    "AWS Lambda Developer Guide, 'Lambda function URLs' (docs.aws.amazon.com/lambda/latest/dg/"
    f"lambda-urls.html): not supported in the regions listed (checked {CHECKED})",
    lacking=frozenset(
        {
            "ap-south-2",
            "ap-southeast-4",
            "ca-west-1",
            "eu-south-2",
            "eu-central-2",
            "il-central-1",
            "me-central-1",
        }
    ),
)
WEB_ADAPTER = RegionalFeature(
    "the Lambda Web Adapter layer",
    f"aws/aws-lambda-web-adapter, 'Zip Packages': the layers of account {LWA_LAYER_ACCOUNT} serve the AWS "
    f"commercial regions; China has its own account (checked {CHECKED})",
)


def _uses_web_adapter(fn: sam.Function) -> bool:
    return any(f":{LWA_LAYER_ACCOUNT}:layer:LambdaAdapterLayer" in _layer_text(layer) for layer in fn.layers)


#: Each feature and how to tell that a function uses it.
FEATURES: tuple[tuple[RegionalFeature, Callable[[sam.Function], bool]], ...] = (
    (DURABLE, lambda fn: fn.durable is not None),
    (SNAPSTART, lambda fn: fn.snapstart),
    (FUNCTION_URLS, lambda fn: "FunctionUrlConfig" in fn.properties),
    (WEB_ADAPTER, _uses_web_adapter),
)


def region_problems(fn: sam.Function, region: str) -> list[str]:
    """One line per feature ``fn`` uses that ``region`` is not known to offer."""
    return [
        f"uses {feature.name}, which {region} is not known to offer ({feature.source}); deploy to "
        f"{RECOMMENDED_REGION} (samconfig.toml's region) or another region that offers all four"
        for feature, used in FEATURES
        if used(fn) and not feature.offered_in(region)
    ]


def region_of(samconfig: Path, environment: str = "default") -> str | None:
    """The region ``samconfig.toml`` names for ``environment`` (any command's section); None if none."""
    try:
        config: Mapping[str, Any] = tomllib.loads(samconfig.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    sections = config.get(environment) or {}
    for command in ("global", "deploy"):
        region = ((sections.get(command) or {}).get("parameters") or {}).get("region")
        if isinstance(region, str) and region:
            return region
    return None


def _layer_text(layer: Any) -> str:
    """A layer entry as text: a built layer's name, an ARN, or an ARN with pseudo-parameters left."""
    for attribute in ("name", "partial"):
        value = getattr(layer, attribute, None)
        if isinstance(value, str):
            return value
    return str(layer)
