// backends.cpp: the portable build (CMake option PYMTP_PORTABLE: GGML_BACKEND_DL and
// GGML_CPU_ALL_VARIANTS, what the wheels ship) keeps llama.cpp's backends in libraries of
// their own beside libpymtp: one CPU backend per SIMD level (libggml-cpu-haswell.so,
// libggml-cpu-skylakex.so, ...), of which ggml loads the best this machine runs, and the RPC
// backend. This file loads them from libpymtp's own directory, and stands in for the two
// functions of the CPU backend the shim calls directly (draft_vocab.cpp), which a build with
// GGML_BACKEND_DL does not link. A build without GGML_BACKEND_DL (the default source build)
// links the backends in and compiles nothing here but an empty shim_load_backends.
#include "backends.h"

#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#if defined(GGML_BACKEND_DL) && !defined(_WIN32)
#include <dlfcn.h>

#include <mutex>
#include <string>

namespace {

std::string g_cpu_path;     // the CPU backend library ggml picked
std::string g_cpu_variant;  // its variant: "haswell" for libggml-cpu-haswell.so

std::string dir_of(const std::string & path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

std::string variant_of(const std::string & path) {
    std::string name = path.substr(path.find_last_of('/') + 1);
    const std::string prefix = "libggml-cpu-", suffix = ".so";
    if (name.compare(0, prefix.size(), prefix) == 0) name.erase(0, prefix.size());
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        name.erase(name.size() - suffix.size());
    }
    return name;
}

// A symbol of the CPU backend library that was loaded (nullptr if none was).
void * cpu_symbol(const char * name) {
    static void * handle = [] {
        // RTLD_NOLOAD: the library ggml already loaded, with one more reference (kept).
        return g_cpu_path.empty() ? nullptr : dlopen(g_cpu_path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    }();
    return handle ? dlsym(handle, name) : nullptr;
}

}  // namespace

void shim_load_backends() {
    Dl_info self{};
    std::string dir = ".";
    if (dladdr((const void *) &shim_load_backends, &self) && self.dli_fname) dir = dir_of(self.dli_fname);
    // every backend ggml knows of that sits in dir (each kind: the best variant that loads
    // and scores above 0 on this machine), then $GGML_BACKEND_PATH if set
    ggml_backend_load_all_from_path(dir.c_str());
    ggml_backend_reg_t cpu = ggml_backend_reg_by_name("CPU");
    Dl_info info{};
    if (cpu && dladdr((const void *) cpu, &info) && info.dli_fname) {
        g_cpu_path = info.dli_fname;
        g_cpu_variant = variant_of(g_cpu_path);
    }
}

// ggml-cpu.h's graph functions, as draft_vocab.cpp calls them: forwarded to the loaded CPU
// backend. Hidden (CXX_VISIBILITY_PRESET), so they never stand in for the backend's own.
extern "C" {

struct ggml_cplan ggml_graph_plan(const struct ggml_cgraph * cgraph, int n_threads, struct ggml_threadpool * threadpool) {
    using fn_t = struct ggml_cplan (*)(const struct ggml_cgraph *, int, struct ggml_threadpool *);
    static const auto fn = (fn_t) cpu_symbol("ggml_graph_plan");
    if (!fn) return ggml_cplan{};  // then ggml_graph_compute fails too, and says so
    return fn(cgraph, n_threads, threadpool);
}

enum ggml_status ggml_graph_compute(struct ggml_cgraph * cgraph, struct ggml_cplan * cplan) {
    using fn_t = enum ggml_status (*)(struct ggml_cgraph *, struct ggml_cplan *);
    static const auto fn = (fn_t) cpu_symbol("ggml_graph_compute");
    return fn ? fn(cgraph, cplan) : GGML_STATUS_FAILED;
}

}  // extern "C"

#if defined(PYMTP_WRAP_SYSTEM_INFO)
// Linked with -Wl,--wrap=llama_print_system_info: pymtp_system_info() (pymtp.cpp) gets
// llama.cpp's text with the CPU variant in the CPU section, "CPU : VARIANT = haswell | SSE3 =
// 1 | ...": every variant registers as "CPU" and lists only its features.

extern "C" const char * __real_llama_print_system_info(void);

extern "C" const char * __wrap_llama_print_system_info(void) {
    static std::mutex mutex;
    static thread_local std::string text;
    std::lock_guard<std::mutex> lock(mutex);
    text = __real_llama_print_system_info();
    const std::string entry = "VARIANT = " + (g_cpu_variant.empty() ? std::string("none") : g_cpu_variant) + " | ";
    const size_t at = text.find("CPU : ");
    if (at == std::string::npos) {
        text += "CPU : " + entry;
    } else {
        text.insert(at + 6, entry);
    }
    return text.c_str();
}
#endif

#else

void shim_load_backends() {
#if defined(GGML_BACKEND_DL)
    ggml_backend_load_all();  // Windows: the executable's directory and the current one
#endif
}

#endif
