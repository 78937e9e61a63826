# The CPU that llama.cpp is compiled for, per architecture: sourced by build.sh (the Lambda layers) and by
# scripts/setup.sh (the local venv), so local runs execute the same kernels as the x86_64 layer and a seeded
# answer is the same token for token on every machine.
#
#   source cpu-flags.sh; cpu_flags x86_64     # prints the CMake arguments, one per line
#
# arm64 is Graviton2 exactly (armv8.2-a+dotprod+fp16: no SVE, no i8mm); x86_64 is AVX2 without AVX-512,
# which not every Lambda x86 host (or developer machine) has. Both build with GGML_NATIVE=OFF: a native
# build differs from machine to machine.
cpu_flags() {
  case "$1" in
    arm64 | aarch64)
      printf '%s\n' -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod+fp16
      ;;
    x86_64)
      printf '%s\n' -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON \
        -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF \
        -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
        -DGGML_AMX_BF16=OFF
      ;;
    *)
      return 2
      ;;
  esac
}
