#!/usr/bin/env bash
# Builds a stand-in for AWS's Lambda base image public.ecr.aws/lambda/python:3.13-<arch> and tags it as SAM
# expects, so `sam local invoke --skip-pull-image` runs where the official image cannot be pulled (only the
# package registries are reachable here). Where it can be pulled, SAM uses the official image and this
# script is not needed.
#
#   usage: DOCKER_HOST=... scripts/lambda-base-image.sh x86_64|arm64      (prints the image tag)
#
# What it has of the official image, which is what `sam local invoke` relies on:
#   - CPython 3.13 as /var/lang/bin/python3.13 (Debian trixie's; the official one is built by AWS);
#   - /var/runtime/bootstrap, which SAM's Runtime Interface Emulator starts: AWS's runtime interface client
#     (awslambdaric, PyPI) with the handler from $_HANDLER;
#   - the runtime's boto3 in the interpreter's own site-packages (the official image's
#     /var/lang/lib/python3.13/site-packages is Debian's /usr/local/lib/python3.13/dist-packages here), so every
#     Python process of the function finds it, the one Lambda Web Adapter starts from run.sh included;
#   - the import order the Python runtime documents: /var/task, then /opt/python/lib/python3.13/site-packages,
#     /opt/python, then the runtime's own packages;
#   - the official image's variables (LAMBDA_TASK_ROOT, LAMBDA_RUNTIME_DIR, PATH, LD_LIBRARY_PATH) and
#     WORKDIR /var/task.
# What it does not have: Amazon Linux 2023 (glibc 2.34). Its userland is Debian's (a newer glibc), so a library
# that needs more than 2.34 would load here and fail on Lambda: `snapllm preflight` checks that on the build.
# arm64 runs under qemu-user (binfmt_misc), when the kernel has it registered.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:?usage: lambda-base-image.sh x86_64|arm64}
case "$arch" in
  x86_64) debian_arch=amd64; wheel_arch=x86_64 ;;
  arm64) debian_arch=arm64; wheel_arch=aarch64 ;;
  *) echo "lambda-base-image: unknown architecture '$arch'" >&2; exit 2 ;;
esac
tag=public.ecr.aws/lambda/python:3.13-$arch
cache=${SNAPLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/snapllm}
suite=${SNAPLLM_BASE_IMAGE_SUITE:-trixie}
mirror=${SNAPLLM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# A shell and coreutils: SAM's image build runs `RUN mv ... && chmod ...` on top of this image.
packages=python3.13,libpython3.13-stdlib,libstdc++6,dash,bash,coreutils
key=$( (cat "$0" requirements/lambda-runtime.txt; echo "$arch $suite $packages") | sha256sum | cut -c1-16)

if [ "$(docker image inspect --format '{{ index .Config.Labels "snapllm.stand-in" }}' "$tag" 2>/dev/null)" = "$key" ]; then
  echo "$tag"
  exit 0
fi
if [ "$arch" = arm64 ] && [ "$(uname -m)" != aarch64 ] && ! grep -qs enabled /proc/sys/fs/binfmt_misc/qemu-aarch64; then
  echo "lambda-base-image: arm64 needs qemu-aarch64 registered in binfmt_misc (qemu-user-static)" >&2
  exit 3
fi
command -v mmdebstrap >/dev/null 2>&1 || {
  echo "lambda-base-image: installing mmdebstrap" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >&2
}

started=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/snapllm-base-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
# --variant=extract runs nothing inside (no maintainer scripts, so no emulation for arm64): unpack CPython and
# what it needs, then lay out what the Lambda image adds.
mmdebstrap --quiet --mode=root --variant=extract --architectures="$debian_arch" --include="$packages" \
  "$suite" "$rootfs" "$mirror" >&2
for d in bin sbin lib lib64; do [ -e "$rootfs/usr/$d" ] && [ ! -e "$rootfs/$d" ] && ln -s "usr/$d" "$rootfs/$d"; done
# dash's maintainer script makes /bin/sh, and extract runs none.
[ -e "$rootfs/usr/bin/sh" ] || ln -s dash "$rootfs/usr/bin/sh"
mkdir -p "$rootfs/var/lang/bin" "$rootfs/var/runtime" "$rootfs/var/task" "$rootfs/opt" "$rootfs/tmp" "$rootfs/etc"
chmod 1777 "$rootfs/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\nsbx_user1051:x:993:990::/home/sbx_user1051:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\n' >"$rootfs/etc/group"
for name in python3.13 python3 python; do ln -s /usr/bin/python3.13 "$rootfs/var/lang/bin/$name"; done

platforms=()
for minor in 34 33 32 31 30 29 28 27 26 25 24 23 22 21 20 19 18 17; do
  platforms+=(--platform "manylinux_2_${minor}_${wheel_arch}")
done
platforms+=(--platform "manylinux2014_${wheel_arch}")
python3 -m pip install --quiet --disable-pip-version-check --no-warn-conflicts --root-user-action=ignore --no-compile --target "$rootfs/usr/local/lib/python3.13/dist-packages" \
  --implementation cp --python-version 3.13 --abi cp313 --only-binary=:all: "${platforms[@]}" \
  -r requirements/lambda-runtime.txt
rm -rf "$rootfs/usr/local/lib/python3.13/dist-packages/bin"

cat >"$rootfs/var/runtime/bootstrap" <<'EOF'
#!/bin/sh
# The Python runtime's search order: the function's code (the working directory, /var/task), the layers,
# then the runtime's own packages (boto3, the runtime interface client).
export PYTHONPATH="/opt/python/lib/python3.13/site-packages:/opt/python:/var/runtime${PYTHONPATH:+:$PYTHONPATH}"
cd "${LAMBDA_TASK_ROOT:-/var/task}"
exec /var/lang/bin/python3.13 -m awslambdaric "$_HANDLER"
EOF
chmod +x "$rootfs/var/runtime/bootstrap"
cat >"$rootfs/lambda-entrypoint.sh" <<'EOF'
#!/bin/sh
# The image's own entry point (SAM replaces it with its Runtime Interface Emulator).
export _HANDLER="$1"
exec /var/runtime/bootstrap
EOF
chmod +x "$rootfs/lambda-entrypoint.sh"

tar -C "$rootfs" -cf - . | docker import \
  --platform "linux/$debian_arch" \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV TZ=:/etc/localtime' \
  --change 'ENV PATH=/var/lang/bin:/usr/local/bin:/usr/bin/:/bin:/opt/bin' \
  --change 'ENV LD_LIBRARY_PATH=/var/lang/lib:/lib64:/usr/lib64:/var/runtime:/var/runtime/lib:/var/task:/var/task/lib:/opt/lib' \
  --change 'ENV LAMBDA_TASK_ROOT=/var/task' \
  --change 'ENV LAMBDA_RUNTIME_DIR=/var/runtime' \
  --change 'WORKDIR /var/task' \
  --change 'ENTRYPOINT ["/lambda-entrypoint.sh"]' \
  --change "LABEL snapllm.stand-in=$key" \
  - "$tag" >/dev/null
# Docker 20.10 labels an imported image with its own architecture, whatever --platform says.
if [ "$(docker image inspect --format '{{.Architecture}}' "$tag")" != "$debian_arch" ]; then
  docker save "$tag" | python3 scripts/set-image-architecture.py "$debian_arch" | docker load >/dev/null
fi
echo "lambda-base-image: built the stand-in $tag in $(($(date +%s) - started)) s" >&2
echo "$tag"
