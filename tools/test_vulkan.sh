#!/usr/bin/env bash
# Build pymtp's library with llama.cpp's Vulkan backend and run the native, fixture and
# lossless test subsets on it (on a machine without a GPU: Mesa's lavapipe, a CPU Vulkan device).
#
#   apt-get install -y glslc glslang-tools spirv-headers libvulkan-dev mesa-vulkan-drivers
#   tools/test_vulkan.sh            # from the repository root, with the dev venv active
#
# The build goes to build/vulkan (ccache helps a rebuild); the tests load that library
# through PYMTP_LIBRARY. Prints the device llama.cpp used and the time each part took.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/vulkan
t0=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_VULKAN=ON >"$build.log" 2>&1 \
    || { tail -30 "$build.log"; exit 1; }
cmake --build "$build" --target pymtp_native >>"$build.log" 2>&1 || { grep -m5 "error" "$build.log"; exit 1; }
t1=$(date +%s)
echo "vulkan build: $((t1 - t0)) s"
export PYMTP_LIBRARY="$PWD/$build/libpymtp.so" PYMTP_HEADER="$PWD/native/shim/pymtp.h" PYTHONPATH="$PWD/src"
# ggml-vulkan skips CPU-type devices (lavapipe) unless named: device 0 is the only one here
export GGML_VK_VISIBLE_DEVICES="${GGML_VK_VISIBLE_DEVICES:-0}"
python - <<'PY'
import pymtp
info = pymtp.system_info()
from pymtp._native import build_info
print(build_info())
assert "VULKAN" in build_info(), "this library was not built with Vulkan"
PY
# native checks, every fixture family, and greedy losslessness (speculative == plain) on Vulkan
python -m pytest -q -p no:cacheprovider tests/test_native.py tests/test_fixtures.py tests/test_speculator.py \
    tests/test_rollback.py tests/test_vulkan_backend.py
echo "vulkan tests: $(( $(date +%s) - t1 )) s"
