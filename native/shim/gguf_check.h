// gguf_check.h: GGUF pre-validation, internal to the shim (not part of the C API).
#ifndef PYMTP_GGUF_CHECK_H
#define PYMTP_GGUF_CHECK_H

#include <string>

namespace pymtp_shim {

// Empty when the file may go to llama.cpp, else why not. *mtp_complete: every MTP block the
// file declares has tensors (llama.cpp makes them optional when the first is missing, and a
// draft context over absent blocks would crash: such a file loads without MTP).
std::string gguf_prevalidate(const char * path, bool * mtp_complete);

}  // namespace pymtp_shim

#endif  // PYMTP_GGUF_CHECK_H
