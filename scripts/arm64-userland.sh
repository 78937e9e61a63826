#!/usr/bin/env bash
# Prints the path of an arm64 Debian trixie userland with python3.13, creating it on first use (cached).
# Built from Debian packages only: mmdebstrap downloads and unpacks python3.13 and its dependencies for arm64
# (--variant=extract runs nothing inside, so no binfmt_misc or chroot is needed); qemu-user runs them later.
#
#   usage: scripts/arm64-userland.sh        (installs qemu-user-static and mmdebstrap with apt when missing)
set -euo pipefail
cache=${SNAPLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/snapllm}
suite=${SNAPLLM_ARM64_SUITE:-trixie}
# What the Lambda python3.13 runtime has that the layers rely on: CPython and libstdc++ (numpy's wheel needs it).
packages=python3.13,libpython3.13-stdlib,libstdc++6
rootfs=$cache/arm64-$suite-$(echo "$packages" | sha256sum | cut -c1-8)
mirror=${SNAPLLM_DEBIAN_MIRROR:-http://deb.debian.org/debian}

need=()
command -v qemu-aarch64-static >/dev/null 2>&1 || need+=(qemu-user-static)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "arm64-userland: install ${need[*]} (apt-get install ${need[*]})" >&2
    exit 1
  fi
  echo "arm64-userland: installing ${need[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi

if [ ! -f "$rootfs/.complete" ]; then
  started=$(date +%s)
  rm -rf "$rootfs"
  mkdir -p "$rootfs"
  mmdebstrap --quiet --mode=root --variant=extract --architectures=arm64 \
    --include="$packages" "$suite" "$rootfs" "$mirror" >&2
  # trixie is merged-/usr, but only installing base-files makes the top-level links that ld.so is found by.
  for d in bin sbin lib; do [ -e "$rootfs/$d" ] || ln -s "usr/$d" "$rootfs/$d"; done
  [ -x "$rootfs/usr/bin/python3.13" ] || { echo "arm64-userland: no python3.13 in $rootfs" >&2; exit 1; }
  touch "$rootfs/.complete"
  echo "arm64-userland: created $rootfs in $(($(date +%s) - started)) s" >&2
fi
echo "$rootfs"
