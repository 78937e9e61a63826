#!/usr/bin/env bash
# `make sam-local`: the functions through the real `sam local invoke`, in Lambda containers, on this machine.
#
#   1. a private Docker engine (scripts/docker-daemon.sh), stopped again on the way out, whatever happens;
#   2. the stand-in for the Lambda python3.13 base image (scripts/lambda-base-image.sh), since the official
#      one cannot be pulled here (where it can, SAM pulls it and the stand-in is never built);
#   3. the x86_64 build (`make build ARCH=x86_64`, in .aws-sam/build-x86_64);
#   4. `snapllm sam-local`: InferenceFunction, RouterFunction and AgentFunction (approved and rejected) through
#      `sam local invoke`, and the check of each function's running container;
#   5. arm64, where binfmt_misc can run qemu-aarch64: the arm64 build's InferenceFunction once in an arm64
#      container (`SNAPLLM_SAM_LOCAL_ARM64=0` skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
export SAM_CLI_TELEMETRY=0
export DOCKER_HOST
DOCKER_HOST=$(scripts/docker-daemon.sh start)
trap 'scripts/docker-daemon.sh stop' EXIT

# `make build` rather than plain `sam build`: it builds only the x86_64 layers (arm64's are placeholders).
mkdir -p .aws-sam
make --no-print-directory build ARCH=x86_64 BUILD_DIR=.aws-sam/build-x86_64 >.aws-sam/build-x86_64.log 2>&1 || {
  tail -n 30 .aws-sam/build-x86_64.log >&2
  exit 1
}
rm -f .aws-sam/build-x86_64.log
scripts/lambda-base-image.sh x86_64 >/dev/null
.venv/bin/snapllm sam-local --arch x86_64 --build-dir .aws-sam/build-x86_64

arm64=${SNAPLLM_SAM_LOCAL_ARM64:-1}
if [ "$arm64" = 1 ] && [ "$(uname -m)" != aarch64 ]; then
  # qemu-user-static registers qemu-aarch64 with the F flag, so the interpreter also works inside containers.
  if ! grep -qs enabled /proc/sys/fs/binfmt_misc/qemu-aarch64; then
    [ -d /proc/sys/fs/binfmt_misc ] && ! mountpoint -q /proc/sys/fs/binfmt_misc &&
      mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
    if ! command -v update-binfmts >/dev/null 2>&1 || [ ! -e /usr/share/binfmts/qemu-aarch64 ]; then
      apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static binfmt-support >&2 || true
    fi
    update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
  fi
  if grep -qs enabled /proc/sys/fs/binfmt_misc/qemu-aarch64; then
    echo
    echo "arm64: the arm64 build's InferenceFunction in an arm64 container (qemu-user, slow)"
    make --no-print-directory build ARCH=arm64 >.aws-sam/build-arm64.log 2>&1 || {
      tail -n 30 .aws-sam/build-arm64.log >&2
      exit 1
    }
    rm -f .aws-sam/build-arm64.log
    scripts/lambda-base-image.sh arm64 >/dev/null
    # The tests' model (SmolLM2-135M): under emulation the default model's init alone would take minutes.
    .venv/bin/snapllm sam-local --arch arm64 --build-dir .aws-sam/build --model-only --model smollm2-135m \
      --logs .aws-sam/sam-local-logs-arm64
  else
    echo "arm64: skipped, binfmt_misc cannot run qemu-aarch64 on this kernel ('make test-arm64' runs the layer)"
  fi
fi
echo "sam-local: done in $(($(date +%s) - started)) s"
