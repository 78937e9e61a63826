#!/usr/bin/env bash
# Applies snapllm's changes to llama.cpp (patches/*.patch, in name order) to an extracted llama-cpp-python
# sdist: sourced by build.sh (the Lambda layers) and by scripts/setup.sh (the local venv), so both run the
# same kernels. A patch already applied is left as it is (the layers' compile tree is kept between builds).
# docs/decoding.md ("One answer whatever the batch") says what each patch is for.
#
#   source patch-sources.sh; patch_sources SDIST_DIR
#   source patch-sources.sh; patches_digest       # what the patches are, for a build's cache key
_patches_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/patches

patch_sources() {
  local patch
  for patch in "$_patches_dir"/*.patch; do
    if ! (cd "$1" && git apply --reverse --check "$patch" 2>/dev/null); then
      (cd "$1" && git apply "$patch")
    fi
  done
}

patches_digest() {
  cat "$_patches_dir"/*.patch | sha256sum | cut -c1-16
}
