"""Which CPU code runs. A portable build (CMake option PYMTP_PORTABLE, what the wheels ship)
carries every one of llama.cpp's CPU backend variants beside libpymtp and loads the best this
machine runs (native/shim/backends.cpp); a source build (pip install .) links one CPU backend,
compiled for the build machine, into libpymtp. Either way the CPU features in use must be ones
this CPU has, and the SIMD it has must be in use."""

from __future__ import annotations

import ctypes
import platform
import sys
from pathlib import Path

import pytest

import pymtp
from pymtp import _native

PORTABLE = "GGML_BACKEND_DL" in pymtp.build_info()
LIB = _native._lib_path.resolve()
HERE = LIB.parent
LINUX = sys.platform.startswith("linux")
X86 = platform.machine() in ("x86_64", "AMD64")

#: llama.cpp's names of x86 features (ggml-cpu.cpp, ggml_backend_cpu_get_features) -> the
#: Linux /proc/cpuinfo flag that says the CPU has it.
X86_FLAGS = {
    "SSE3": "pni",
    "SSSE3": "ssse3",
    "AVX": "avx",
    "AVX2": "avx2",
    "F16C": "f16c",
    "FMA": "fma",
    "BMI2": "bmi2",
    "AVX_VNNI": "avx_vnni",
    "AVX512": "avx512f",
    "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16",
    "AMX_INT8": "amx_int8",
}


def cpu_features() -> dict[str, str]:
    """The CPU section of pymtp.system_info(): ``{"AVX2": "1", ...}`` (a portable build also
    names its variant: ``"VARIANT": "haswell"``)."""
    text = pymtp.system_info().split("; ", 1)[1]
    assert "CPU : " in text, text
    out = {}
    for item in text[text.index("CPU : ") + len("CPU : ") :].split(" | "):
        if " : " in item:  # the next backend's section
            break
        if item.strip():
            name, _, value = item.partition(" = ")
            out[name.strip()] = value.strip()
    return out


def cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def mapped_files() -> set[Path]:
    """The files mapped into this process (Linux)."""
    out = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/"):
                out.add(Path(parts[5].strip()))
    return out


@pytest.mark.skipif(not (LINUX and X86), reason="reads x86 CPU flags from Linux's /proc/cpuinfo")
def test_the_cpu_features_in_use_are_the_cpus_best():
    used = {name for name, value in cpu_features().items() if value == "1"}
    flags = cpu_flags()
    # nothing this CPU lacks (it would have died of SIGILL, or ggml reports features it does not run)
    missing = sorted(name for name in used if name in X86_FLAGS and X86_FLAGS[name] not in flags)
    assert not missing, (missing, pymtp.system_info())
    # and the SIMD this CPU has is used: a portable build that fell back to a baseline
    # variant (or a source build that lost GGML_NATIVE) fails here
    if {"avx", "avx2", "fma", "f16c", "bmi2"} <= flags:
        assert {"AVX", "AVX2", "FMA", "F16C"} <= used, pymtp.system_info()
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"} <= flags:
        assert "AVX512" in used, pymtp.system_info()


def test_libpymtp_exports_its_api_only():
    lib = ctypes.CDLL(str(LIB))
    assert hasattr(lib, "pymtp_build_info")
    # ggml's CPU backend is not reachable through libpymtp: linked in privately (source build),
    # or a separate module that ggml loads (portable build), where the shim's stand-ins for
    # ggml_graph_plan/ggml_graph_compute (backends.cpp) stay hidden
    for name in ("ggml_graph_compute", "ggml_graph_plan", "ggml_backend_cpu_reg"):
        assert not hasattr(lib, name), name


@pytest.mark.skipif(PORTABLE, reason="a portable build is several libraries (the test below)")
def test_source_build_is_one_library_with_private_symbols():
    assert "VARIANT" not in cpu_features()
    assert not sorted(HERE.glob("libggml*")) and not sorted(HERE.glob("libpymtp-*"))
    lib = ctypes.CDLL(str(LIB))
    for name in ("llama_backend_init", "llama_print_system_info", "ggml_init", "ggml_backend_load_all"):
        assert not hasattr(lib, name), f"{name} is exported: llama.cpp's symbols should stay private"


@pytest.mark.skipif(
    not PORTABLE,
    reason="a source build links its one CPU backend in: no variants to pick "
    "(a build with CMAKE_ARGS=-DPYMTP_PORTABLE=ON has them)",
)
def test_portable_build_loaded_a_cpu_variant_from_beside_the_library():
    variant = cpu_features().get("VARIANT")
    assert variant and variant != "none", pymtp.system_info()
    chosen = HERE / f"libggml-cpu-{variant}.so"
    assert chosen.is_file(), chosen
    shipped = sorted(p.name for p in HERE.glob("libggml-cpu-*.so"))
    assert len(shipped) > 1, shipped  # every variant ships; one is picked at run time
    if LINUX:
        maps = {p.resolve() for p in mapped_files()}
        assert chosen.resolve() in maps
        # self-contained: llama.cpp's libraries in this process are the package's own
        ours = sorted(p for p in maps if p.name.startswith(("libggml", "libpymtp")))
        assert ours and all(p.parent == HERE for p in ours), ours
        assert {"libpymtp.so", "libpymtp-llama.so", "libpymtp-ggml.so", "libpymtp-ggml-base.so"} <= {
            p.name for p in ours
        }
