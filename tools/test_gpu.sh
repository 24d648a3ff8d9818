#!/usr/bin/env bash
# Build pymtp's library with one of llama.cpp's GPU backends and run the native, fixture,
# lossless and rollback test subsets on it.
#
#   tools/test_gpu.sh vulkan    # Vulkan; on a machine without a GPU: Mesa's lavapipe (a CPU
#                               #   Vulkan device). apt-get install -y glslc glslang-tools
#                               #   spirv-headers libvulkan-dev mesa-vulkan-drivers (Debian 12:
#                               #   Mesa from bookworm-backports; 22.3.6's lavapipe crashes)
#   tools/test_gpu.sh cuda      # CUDA (nvcc 12.x or 13.x); CUDA_ARCH=90 picks the GPU generation
#                               #   (default: "native", the GPU of this machine)
#
# From the repository root, with the dev venv active. The build goes to build/<backend>
# (ccache helps a rebuild); the tests load that library through PYMTP_LIBRARY. With
# LLAMA_TOOLS=1 the same build also makes llama.cpp's own tools (build/<backend>/bin), for
# `pymtp bench --llama-bin`. Prints the time each part took.
set -euo pipefail
cd "$(dirname "$0")/.."
backend=${1:?usage: tools/test_gpu.sh vulkan|cuda}
build=build/$backend
case $backend in
    vulkan) flags=(-DGGML_VULKAN=ON) ;;
    cuda)   flags=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-native}") ;;
    *) echo "unknown backend: $backend (vulkan or cuda)"; exit 2 ;;
esac
targets=(pymtp_native)
if [ "${LLAMA_TOOLS:-0}" = 1 ]; then
    flags+=(-DPYMTP_LLAMA_TOOLS=ON)
    targets+=(llama-speculative-simple llama-completion)
fi
t0=$(date +%s)
mkdir -p build
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${flags[@]}" >"$build.log" 2>&1 \
    || { tail -30 "$build.log"; exit 1; }
cmake --build "$build" --target "${targets[@]}" >>"$build.log" 2>&1 || { grep -m5 -A5 "error" "$build.log"; exit 1; }
t1=$(date +%s)
echo "$backend build: $((t1 - t0)) s"
export PYMTP_LIBRARY="$PWD/$build/libpymtp.so" PYMTP_HEADER="$PWD/native/shim/pymtp.h" PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if [ "$backend" = vulkan ]; then
    # ggml-vulkan skips CPU-type devices (lavapipe) unless named: device 0 is the only one there
    export GGML_VK_VISIBLE_DEVICES="${GGML_VK_VISIBLE_DEVICES:-0}"
    # lavapipe's worker threads ping-pong on futexes for ggml's many small dispatches: on 2
    # cores 32 tokens of the glm4moe fixture took 0.77 s with its default threads, 0.53 s with
    # none (each dispatch runs in the submitting thread); real GPUs ignore it
    export LP_NUM_THREADS="${LP_NUM_THREADS:-0}"
fi
python3 - "$backend" <<'PY'
import sys
from pymtp._native import build_info
print(build_info())
assert sys.argv[1].upper() in build_info(), f"this library was not built with {sys.argv[1]}"
PY
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0
# native checks, every fixture family, and greedy losslessness (speculative == plain) on the GPU
python3 -m pytest -q -p no:cacheprovider tests/test_native.py tests/test_fixtures.py tests/test_speculator.py \
    tests/test_rollback.py tests/test_gpu_backend.py "${@:2}"
echo "$backend tests: $(( $(date +%s) - t1 )) s"
