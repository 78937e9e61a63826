"""The pause before a retry, for every retry loop in the runtime (model copy, S3 loads, Lambda invokes,
CloudFormation responses)."""

from __future__ import annotations

import random


def backoff_s(retry: int, *, base_s: float, cap_s: float = 30.0) -> float:
    """Seconds to wait before retry number ``retry`` (1 for the first): full jitter up to
    ``base_s * 2**retry``, at most ``cap_s``, so parts that failed together do not retry together."""
    return random.uniform(0, min(cap_s, base_s * 2**retry))
