"""Compares `scripts/arm64_smoke.py`'s JSON lines for `scripts/test-arm64.sh`; exits 1 on a difference.

python scripts/arm64_compare.py host ARM_JSON HOST_JSON LAYER_DIR   # the arm64 layer against the host
python scripts/arm64_compare.py repack REPACKED_JSON PLAIN_JSON      # repacked kernels against plain ones
python scripts/arm64_compare.py constrained ARM_JSON HOST_JSON SNAPLLM_LAYER_DIR   # a constrained answer
"""

from __future__ import annotations

import json
import sys

# Both kernels multiply the same 4-bit weights by the same 8-bit activations; only the order in which the
# blocks' float products are summed differs, so the logits may differ in their last bits, not in the ranking.
REPACK_TOLERANCE = 1e-2


def against_host(arm: dict, host: dict, layer: str) -> tuple[list[str], str]:
    problems = []
    if arm["machine"] != "aarch64":
        problems.append(f"ran on {arm['machine']}, not aarch64")
    if not arm["llama_cpp"].startswith(layer):
        problems.append(f"llama_cpp came from {arm['llama_cpp']}, not the built layer")
    if not arm["tokens"]:
        problems.append("no tokens generated")
    if arm["tokens"] != host["tokens"]:
        problems.append(f"arm64 tokens {arm['tokens']} differ from the host's {host['tokens']}")
    return problems, f"{len(arm['tokens'])} tokens under emulation match the host: {arm['text']!r}"


def constrained(arm: dict, host: dict, layer: str) -> tuple[list[str], str]:
    problems = []
    if arm["machine"] != "aarch64":
        problems.append(f"ran on {arm['machine']}, not aarch64")
    if not arm["llguidance"].startswith(layer):
        problems.append(f"llguidance came from {arm['llguidance']}, not the built snapllm layer")
    if not arm["text"].startswith("{"):
        problems.append(f"the constrained answer {arm['text']!r} is not a JSON object")
    if arm["tokens"] != host["tokens"]:
        problems.append(f"arm64 tokens {arm['tokens']} differ from the host's {host['tokens']}")
    return problems, f"the constrained answer under emulation matches the host's: {arm['text']!r}"


def with_and_without_repacking(repacked: dict, plain: dict) -> tuple[list[str], str]:
    gaps = [abs(a[1] - b[1]) for a, b in zip(repacked["top"], plain["top"], strict=True)]
    problems = []
    if [token for token, _ in repacked["top"]] != [token for token, _ in plain["top"]]:
        problems.append(f"the most likely tokens differ: {repacked['top']} against {plain['top']}")
    elif max(gaps) > REPACK_TOLERANCE:
        problems.append(f"the top logits differ by {max(gaps):.4f}, over {REPACK_TOLERANCE}")
    if not plain["tokens"] or repacked["tokens"] != plain["tokens"]:
        problems.append(f"repacked tokens {repacked['tokens']} differ from the plain ones {plain['tokens']}")
    return problems, (
        f"{len(plain['tokens'])} tokens the same with repacking as without; top logits within {max(gaps):.4f}"
    )


def main(argv: list[str]) -> int:
    kind, first, second, *rest = argv
    runs = json.loads(first), json.loads(second)
    if kind == "host":
        problems, success = against_host(*runs, *rest)
    elif kind == "constrained":
        problems, success = constrained(*runs, *rest)
    else:
        problems, success = with_and_without_repacking(*runs)
    for problem in problems:
        print(f"test-arm64: FAILED ({kind}): {problem}")
    if problems:
        return 1
    print(f"test-arm64: OK: {success}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
