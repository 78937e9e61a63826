#!/usr/bin/env bash
# Builds the LlamaCppLayer for one Lambda architecture without a container: llama.cpp is cross-compiled with
# zig (from the `ziglang` PyPI package) against glibc 2.34 (Amazon Linux 2023, the python3.13 runtime) and
# the pure-Python part of llama-cpp-python plus its wheel dependencies is laid out under python/.
#
#   usage: build.sh arm64|x86_64 ARTIFACTS_DIR
#
# arm64 targets Graviton2 exactly (armv8.2-a+dotprod+fp16, no SVE, no i8mm); x86_64 targets AVX2 without
# AVX-512, which not every Lambda x86 host has. zig links its own libc++ statically and OpenMP is off, so the
# libraries need nothing from the runtime beyond glibc. The finished layer is cached under
# $SNAPLLM_CACHE_DIR (default ~/.cache/snapllm) keyed by everything that shapes it, so a second build copies
# instead of compiling.
set -euo pipefail

arch=${1:?usage: build.sh arm64|x86_64 ARTIFACTS_DIR}
out=${2:?usage: build.sh arm64|x86_64 ARTIFACTS_DIR}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=cpu-flags.sh
source "$here/cpu-flags.sh"
# shellcheck source=patch-sources.sh
source "$here/patch-sources.sh"
version=0.3.36
glibc=2.34
jobs=${SNAPLLM_BUILD_JOBS:-$(nproc)}

case "$arch" in
  arm64)
    triple=aarch64-linux-gnu.$glibc
    processor=aarch64
    wheel_arch=aarch64
    ;;
  x86_64)
    triple=x86_64-linux-gnu.$glibc
    processor=x86_64
    wheel_arch=x86_64
    ;;
  *)
    echo "build.sh: unknown architecture '$arch' (expected arm64 or x86_64)" >&2
    exit 2
    ;;
esac
mapfile -t cpu_args < <(cpu_flags "$arch")

# A Python that can run zig and pip: an explicit choice, then PATH (`make build` puts .tools/bin first), then
# the project's tools venv when sam was started from the project root.
find_python() {
  local c
  for c in "${SNAPLLM_BUILD_PYTHON:-}" python3 python "${PWD}/.tools/bin/python"; do
    [ -n "$c" ] || continue
    if "$c" -c 'import ziglang, pip' >/dev/null 2>&1; then
      command -v "$c"
      return 0
    fi
  done
  echo "build.sh: no Python with the 'ziglang' package found: run 'make tools' and build with 'make build'" >&2
  return 1
}
py=$(find_python)
zig=$("$py" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
zig_version=$("$zig" version)

cache_root=${SNAPLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/snapllm}/llama-cpp
key=$( (cat "$here/build.sh" "$here/cpu-flags.sh" "$here/patch-sources.sh" "$here/requirements.txt" "$here"/patches/*.patch; echo "$arch $version $glibc $zig_version") | sha256sum | cut -c1-16)
done_dir=$cache_root/$arch-$key

install_layer() {
  rm -rf "$out/python"
  mkdir -p "$out"
  cp -a "$done_dir/python" "$out/python"
}

if [ -f "$done_dir/.complete" ]; then
  echo "llama-cpp layer: cached build $done_dir"
  install_layer
  exit 0
fi

started=$(date +%s)
sdist_dir=$cache_root/sdist
sdist=$sdist_dir/llama_cpp_python-$version.tar.gz
if [ ! -f "$sdist" ]; then
  "$py" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$version" -d "$sdist_dir"
fi

# The compile tree is per architecture, not per key: after a change to this script ninja recompiles only
# what the change touches.
work=$cache_root/work-$arch
src=$work/llama_cpp_python-$version
if [ ! -d "$src" ]; then
  mkdir -p "$work"
  tar -xzf "$sdist" -C "$work"
fi
patch_sources "$src"

# CMake wants one executable per tool. The compiler wrapper also turns ggml's clang-style
# -march=armv8.2-a+dotprod+fp16 into zig's CPU syntax (zig cc rejects -march for aarch64).
tools=$work/bin
mkdir -p "$tools"
cat >"$tools/cc" <<EOF
#!/usr/bin/env bash
args=()
for a in "\$@"; do
  case "\$a" in
    -march=armv*-a*)
      spec=\${a#-march=armv}
      base=\${spec%%-a*}
      feats=\${spec#*-a}
      feats=\${feats//+fp16/+fullfp16}
      args+=("-mcpu=generic+v\${base//./_}a\$feats")
      ;;
    *) args+=("\$a") ;;
  esac
done
exec "$zig" \${ZIG_DRIVER:-cc} -target $triple "\${args[@]}"
EOF
printf '#!/bin/sh\nZIG_DRIVER=c++ exec "%s" "$@"\n' "$tools/cc" >"$tools/c++"
printf '#!/bin/sh\nexec "%s" ar "$@"\n' "$zig" >"$tools/ar"
printf '#!/bin/sh\nexec "%s" ranlib "$@"\n' "$zig" >"$tools/ranlib"
chmod +x "$tools"/*

cat >"$work/toolchain.cmake" <<EOF
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR $processor)
set(CMAKE_C_COMPILER $tools/cc)
set(CMAKE_CXX_COMPILER $tools/c++)
set(CMAKE_AR $tools/ar CACHE FILEPATH "")
set(CMAKE_RANLIB $tools/ranlib CACHE FILEPATH "")
# Never pick up the build machine's (x86_64, newer glibc) libraries or headers.
set(CMAKE_FIND_ROOT_PATH $work/sysroot-none)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
EOF

build=$work/build
# Only the libraries llama-cpp-python loads are built: no common/tools/server (they want OpenSSL and more),
# no multimodal library (llama_cpp imports it lazily), no OpenMP (Lambda has no libgomp), nothing fetched.
cmake -S "$src/vendor/llama.cpp" -B "$build" -G Ninja \
  -DCMAKE_TOOLCHAIN_FILE="$work/toolchain.cmake" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS="-fno-sanitize=undefined" \
  -DCMAKE_CXX_FLAGS="-fno-sanitize=undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-s" \
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
  -DCMAKE_INSTALL_RPATH='$ORIGIN' \
  -DBUILD_SHARED_LIBS=ON \
  -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_MTMD=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DGGML_OPENMP=OFF -DGGML_OPENMP_FETCH=OFF -DGGML_BACKEND_DL=OFF \
  -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_BLAS=OFF -DGGML_CPU_KLEIDIAI=OFF \
  "${cpu_args[@]}" >"$work/configure.log"
if [ "$arch" = arm64 ]; then
  # Graviton2 (Neoverse N1) has dotprod and fp16 arithmetic but no SVE, i8mm or SME: stop if ggml's feature
  # probes, compiled with the flags above, saw anything else (a newer-CPU build dies with SIGILL on Lambda).
  for probe in HAVE_DOTPROD:INTERNAL=1 HAVE_FP16_VECTOR_ARITHMETIC:INTERNAL=1 HAVE_SVE:INTERNAL= \
    HAVE_MATMUL_INT8:INTERNAL= HAVE_SME:INTERNAL=; do
    grep -qx "$probe" "$build/CMakeCache.txt" || {
      echo "build.sh: CPU features are not Graviton2's: expected $probe in $build/CMakeCache.txt" >&2
      exit 1
    }
  done
fi
cmake --build "$build" --parallel "$jobs" --target llama ggml ggml-base ggml-cpu

stage=$work/stage
rm -rf "$stage"
mkdir -p "$stage/python"
# The server needs fastapi/uvicorn, which the layer does not carry.
(cd "$src" && tar --exclude='__pycache__' --exclude='llama_cpp/server' --exclude='llama_cpp/lib' -cf - llama_cpp) |
  tar -xf - -C "$stage/python"
lib=$stage/python/llama_cpp/lib
mkdir -p "$lib"
# llama-cpp-python opens libllama.so and libggml.so by name; the rest are found through DT_NEEDED by soname
# with RUNPATH $ORIGIN. Plain copies, no symlinks: a zip layer should not depend on them.
built=$build/bin
for name in libllama.so libggml.so libggml.so.0 libggml-base.so.0 libggml-cpu.so.0; do
  cp -L "$built/$name" "$lib/$name"
done
dist=$stage/python/llama_cpp_python-$version.dist-info
mkdir -p "$dist"
printf 'Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: %s\n' "$version" >"$dist/METADATA"
printf 'snapllm-layer-build\n' >"$dist/INSTALLER"

platforms=()
for minor in 34 33 32 31 30 29 28 27 26 25 24 23 22 21 20 19 18 17; do
  platforms+=(--platform "manylinux_2_${minor}_${wheel_arch}")
done
platforms+=(--platform "manylinux2014_${wheel_arch}")
"$py" -m pip install --quiet --disable-pip-version-check --no-compile --no-warn-conflicts --target "$stage/python" \
  --implementation cp --python-version 3.13 --abi cp313 --only-binary=:all: "${platforms[@]}" \
  -r "$here/requirements.txt"
find "$stage/python" -name __pycache__ -type d -prune -exec rm -rf {} +
rm -rf "$stage/python/bin"

rm -rf "$done_dir"
mv "$stage" "$done_dir"
touch "$done_dir/.complete"
# Earlier layers of this architecture (other keys) are stale: keep the cache at one layer per architecture.
for old in "$cache_root/$arch"-*; do
  [ "$old" = "$done_dir" ] || rm -rf "$old"
done
echo "llama-cpp layer: built $arch in $(($(date +%s) - started)) s -> $done_dir"
install_layer
