// backends.h: llama.cpp's backends when they are separate libraries (private to the shim).
#pragma once

// Built with GGML_BACKEND_DL (CMake option PYMTP_PORTABLE, the wheels): loads the backend
// libraries installed beside libpymtp (libggml-cpu-<variant>.so: the best CPU variant this
// machine runs, libggml-rpc.so, ...). Call once, before llama_backend_init. Without
// GGML_BACKEND_DL the backends are linked in and this does nothing.
void shim_load_backends();
