#!/usr/bin/env bash
# Builds tqserve for a lent GPU machine (the device tool: x86-64, Ubuntu 24.04, CUDA 13 driver,
# 64 MiB per call, no package registry) and gathers what it runs there into build/device-bundle:
#   bin/   tqserve, tq_cuda_tests, bench_cuda_* (TQ_CUDA, TQ_SLIM: no OpenBLAS, no libgd)
#   lib/   the shared libraries they need beyond glibc, libstdc++ and cuBLAS (which the machine has:
#          scripts/device_check.sh finds cuBLAS in its CUDA toolkit or python packages)
#   testdata/stories260K   the small test model (the SmolLM2 GGUF is 98 MB and cannot travel)
#   testdata/qwen2-tokenizer   the tokenizer the Qwen3-shaped timing model is served with
# Then: device run with carry ["build/device-bundle"], command `bash scripts/device_check.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${TQ_DEVICE_BUILD:-build-device}
BUNDLE=build/device-bundle
TESTDATA=${TQ_TESTDATA_DIR:-../shared/testdata}
LIMIT_MIB=48  # the call carries the working tree too

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTQ_CUDA=ON -DTQ_SLIM=ON >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target tqserve tq_cuda_tests bench_cuda_attention

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib" "$BUNDLE/testdata"
for exe in tqserve tq_cuda_tests "$BUILD"/bench_cuda_*; do
  exe=$(basename "$exe")
  strip --strip-debug -o "$BUNDLE/bin/$exe" "$BUILD/$exe"
done
# What every Ubuntu 24.04 has (glibc, GCC's runtime), what the GPU machine provides (the driver,
# cuBLAS), and the kernel's own.
system='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libgcc_s|libstdc\+\+|libcuda|libcublas|libcublasLt)\.so'
ldd "$BUNDLE"/bin/* | awk '/=>/ && $3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
  name=$(basename "$lib")
  [[ $name =~ $system ]] && continue
  cp -L "$lib" "$BUNDLE/lib/$name"
done
for data in stories260K qwen2-tokenizer; do
  if [[ -d $TESTDATA/$data ]]; then
    mkdir -p "$BUNDLE/testdata/$data"
    cp "$TESTDATA/$data/"* "$BUNDLE/testdata/$data/"
  else
    echo "device_bundle: no $TESTDATA/$data: the bundle goes without it (what needs it will skip)" >&2
  fi
done
size_mib=$(du -sm "$BUNDLE" | cut -f1)
echo "device_bundle: $BUNDLE, ${size_mib} MiB ($(ls "$BUNDLE/lib" | wc -l) libraries)"
if ((size_mib > LIMIT_MIB)); then
  echo "device_bundle: over ${LIMIT_MIB} MiB: the call would not carry it with the working tree" >&2
  exit 1
fi
