// pymtp.cpp: the C shim over llama.cpp. See pymtp.h for the contract.
//
// Every entry point checks its handles and arguments first, then calls
// llama.cpp inside a try block: llama.cpp asserts (abort) on some bad input and
// throws C++ exceptions on other, and neither may reach the Python process.

#pragma GCC visibility push(default)
#include "pymtp.h"
#pragma GCC visibility pop

#include "llama.h"
#include "llama-ext.h"
#include "llama-arch.h"   // internal, reachable because libllama is linked statically
#include "gguf.h"         // ggml's GGUF reader: pre-validates files before llama.cpp sees them

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <memory>
#include <vector>

#ifndef PYMTP_LLAMA_COMMIT
#define PYMTP_LLAMA_COMMIT "unknown"
#endif
#ifndef PYMTP_BACKENDS
#define PYMTP_BACKENDS "CPU"
#endif

struct pymtp_model {
    llama_model * model = nullptr;
    const llama_vocab * vocab = nullptr;
    bool mtp_loaded = false;
    int n_contexts = 0;            // live contexts on this model
};

struct pymtp_ctx {
    llama_context * ctx = nullptr;
    pymtp_model * model = nullptr;
    pymtp_ctx * target = nullptr;  // set on draft contexts
    llama_batch_ext * batch = nullptr;
    bool is_draft = false;
    bool shares_memory = false;    // draft that reads the target's KV (Gemma 4 assistants)
    bool has_hidden = false;       // decodes produce hidden rows
    int n_drafts = 0;              // live draft contexts bound to this target
    uint32_t n_ctx = 0, n_batch = 0, n_seq_max = 1;
    int32_t n_vocab = 0, n_embd = 0;
    int32_t last_tokens = 0, last_outputs = 0;
    int32_t last_batch = 0;        // tokens of the last successful decode (kept across seq_rm)
    std::vector<float> own_row;    // the head's hidden row fed back by pymtp_draft_greedy
    std::vector<uint8_t> checkpoint;
    size_t checkpoint_size = 0;
    int32_t checkpoint_seq = -1;
};

// ---- errors and handle registry ------------------------------------------------

static thread_local std::string g_error;
static std::mutex g_registry_mutex;
static std::unordered_set<const void *> g_live;

static int fail(int code, const char * fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    g_error = buf;
    return code;
}

static void ok() { g_error.clear(); }

static bool live(const void * p) {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    return p != nullptr && g_live.count(p) != 0;
}
static void track(const void * p)   { std::lock_guard<std::mutex> lock(g_registry_mutex); g_live.insert(p); }
static void untrack(const void * p) { std::lock_guard<std::mutex> lock(g_registry_mutex); g_live.erase(p); }

#define CHECK_MODEL(m) \
    if (!live(m)) return fail(PYMTP_ERR_HANDLE, "invalid model handle (closed or never opened)")
#define CHECK_CTX(c) \
    if (!live(c)) return fail(PYMTP_ERR_HANDLE, "invalid context handle (closed or never opened)")
#define GUARD_BEGIN try {
#define GUARD_END                                                                 \
    } catch (const std::exception & e) {                                          \
        return fail(PYMTP_ERR_DECODE, "llama.cpp raised: %s", e.what());          \
    } catch (...) {                                                               \
        return fail(PYMTP_ERR_DECODE, "llama.cpp raised an unknown exception");   \
    }

// ---- logging ---------------------------------------------------------------------

static std::mutex g_log_mutex;
static pymtp_log_fn g_log_fn = nullptr;
static int g_log_min = PYMTP_LOG_ERROR + 1;
static std::string g_log_line;
static int g_log_level = PYMTP_LOG_INFO;
static std::string g_log_last_error;   // error lines since the load began, quoted by failed loads

static void on_log(ggml_log_level level, const char * text, void *) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    if (level != GGML_LOG_LEVEL_CONT) {
        g_log_level = level == GGML_LOG_LEVEL_NONE ? PYMTP_LOG_INFO : (int) level;
    }
    g_log_line += text ? text : "";
    if (g_log_line.empty() || g_log_line.back() != '\n') {
        return;
    }
    g_log_line.pop_back();
    if (g_log_level >= PYMTP_LOG_ERROR && g_log_last_error.size() < 600) {
        // every error line of a failed load: the first says why, the last only that it failed
        g_log_last_error += (g_log_last_error.empty() ? "" : "; ") + g_log_line;
    }
    if (g_log_fn && g_log_level >= g_log_min) {
        g_log_fn(g_log_level, g_log_line.c_str());
    }
    g_log_line.clear();
}

static void ensure_init() {
    static std::once_flag once;
    std::call_once(once, [] {
        llama_log_set(on_log, nullptr);
        llama_backend_init();
    });
}


// ---- GGUF pre-validation -----------------------------------------------------------------
//
// llama.cpp checks most of a GGUF, but a few corruptions reach a GGML_ASSERT / GGML_ABORT
// (load_hparams' layer and expert counts, duplicate vocabulary entries) or an abort at the
// first decode (an unknown expert gating function, rope sections wider than a head, a norm
// stored in a type the CPU's binary ops cannot read). An abort would take the Python process
// down, so these files are refused here first, with ggml's own parser (metadata only).
// The list comes from fuzzing (tools/fuzz_campaign.py); see tests/test_fuzz.py.

namespace {

struct kv_range {
    bool present = false;
    bool integer = true;     // every value is an integer
    int64_t min = 0, max = 0;
    size_t n = 0;
};

bool gguf_int_at(const gguf_context * g, int64_t id, enum gguf_type t, size_t i, bool is_arr, int64_t & v) {
    const void * base = is_arr ? gguf_get_arr_data(g, id) : gguf_get_val_data(g, id);
    if (!base) return false;
    switch (t) {
        case GGUF_TYPE_UINT8:  v = ((const uint8_t  *) base)[i]; return true;
        case GGUF_TYPE_INT8:   v = ((const int8_t   *) base)[i]; return true;
        case GGUF_TYPE_UINT16: v = ((const uint16_t *) base)[i]; return true;
        case GGUF_TYPE_INT16:  v = ((const int16_t  *) base)[i]; return true;
        case GGUF_TYPE_UINT32: v = ((const uint32_t *) base)[i]; return true;
        case GGUF_TYPE_INT32:  v = ((const int32_t  *) base)[i]; return true;
        case GGUF_TYPE_UINT64: {
            const uint64_t u = ((const uint64_t *) base)[i];
            v = u > (uint64_t) std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max() : (int64_t) u;
            return true;
        }
        case GGUF_TYPE_INT64:  v = ((const int64_t  *) base)[i]; return true;
        case GGUF_TYPE_BOOL:   v = ((const int8_t   *) base)[i] != 0; return true;
        default: return false;
    }
}

// The integer value(s) of key: a scalar, or an array of per-layer values.
kv_range gguf_ints(const gguf_context * g, const std::string & key) {
    kv_range r;
    const int64_t id = gguf_find_key(g, key.c_str());
    if (id < 0) return r;
    r.present = true;
    enum gguf_type t = gguf_get_kv_type(g, id);
    const bool is_arr = t == GGUF_TYPE_ARRAY;
    if (is_arr) t = gguf_get_arr_type(g, id);
    if (t == GGUF_TYPE_STRING || t == GGUF_TYPE_ARRAY) { r.integer = false; return r; }
    r.n = is_arr ? gguf_get_arr_n(g, id) : 1;
    for (size_t i = 0; i < r.n; ++i) {
        int64_t v = 0;
        if (!gguf_int_at(g, id, t, i, is_arr, v)) { r.integer = false; return r; }
        if (i == 0 || v < r.min) r.min = v;
        if (i == 0 || v > r.max) r.max = v;
    }
    return r;
}

bool ends_with(const std::string & s, const char * suffix) {
    const size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Empty when the file may go to llama.cpp, else why not. *mtp_complete: every MTP block the
// file declares has tensors (llama.cpp makes them optional when the first is missing, and a
// draft context over absent blocks would crash: such a file loads without MTP).
std::string gguf_prevalidate(const char * path, bool * mtp_complete) {
    *mtp_complete = true;
    gguf_init_params gp;
    gp.no_alloc = true;
    gp.ctx = nullptr;
    std::unique_ptr<gguf_context, void (*)(gguf_context *)> g(gguf_init_from_file(path, gp), gguf_free);
    if (!g) return "the GGUF header, metadata or tensor table is corrupt or truncated";
    const gguf_context * c = g.get();
    char buf[512];

    const int64_t arch_id = gguf_find_key(c, "general.architecture");
    if (arch_id < 0 || gguf_get_kv_type(c, arch_id) != GGUF_TYPE_STRING) {
        return "general.architecture is missing or not a string";
    }
    const std::string arch = gguf_get_val_str(c, arch_id);
    if (llm_arch_from_string(arch) == LLM_ARCH_UNKNOWN) {
        return "unknown model architecture: '" + arch + "' (this build of llama.cpp does not support it)";
    }
    auto key = [&](const char * suffix) { return arch + "." + suffix; };
    auto bad = [&](const char * fmt, auto... args) {
        std::snprintf(buf, sizeof(buf), fmt, args...);
        return std::string(buf);
    };
    for (const char * k : {"block_count", "nextn_predict_layers", "expert_count", "expert_used_count",
                           "expert_group_count", "expert_group_used_count", "expert_gating_func",
                           "attention.head_count", "attention.head_count_kv", "attention.key_length",
                           "rope.dimension_count", "rope.dimension_sections", "embedding_length"}) {
        const kv_range r = gguf_ints(c, key(k));
        if (r.present && (!r.integer || r.min < 0)) return bad("%s.%s must hold non-negative integers", arch.c_str(), k);
    }

    // load_hparams' asserts (llama-model.cpp), in its order.
    const kv_range n_layer = gguf_ints(c, key("block_count"));
    if (n_layer.present && (n_layer.n != 1 || n_layer.max < 1 || n_layer.max > 512)) {
        return bad("%s.block_count must be one value in [1, 512]", arch.c_str());
    }
    const int64_t n_layer_all = n_layer.present ? n_layer.max : 0;
    const kv_range n_nextn = gguf_ints(c, key("nextn_predict_layers"));
    if (n_nextn.present && (n_nextn.n != 1 || n_nextn.max > n_layer_all)) {
        return bad("%s.nextn_predict_layers (%lld) exceeds block_count (%lld)", arch.c_str(),
                   (long long) n_nextn.max, (long long) n_layer_all);
    }
    const kv_range n_expert_r = gguf_ints(c, key("expert_count"));
    const int64_t n_expert = n_expert_r.present ? n_expert_r.max : 0;
    const kv_range used = gguf_ints(c, key("expert_used_count"));
    const int64_t used_max = used.present ? used.max : 0;
    const int64_t groups = gguf_ints(c, key("expert_group_count")).max;
    const int64_t group_used = gguf_ints(c, key("expert_group_used_count")).max;
    if (n_expert > 1024) return bad("%s.expert_count %lld is too large", arch.c_str(), (long long) n_expert);
    if (used_max > n_expert) {
        return bad("%s.expert_used_count (%lld) exceeds expert_count (%lld)", arch.c_str(), (long long) used_max,
                   (long long) n_expert);
    }
    if (n_expert > 0) {
        if (used_max < 1 || (used.present && used.min < 1 && used.n == 1)) {
            return bad("%s.expert_used_count must be at least 1 with %lld experts", arch.c_str(), (long long) n_expert);
        }
        if (groups >= n_expert) return bad("%s.expert_group_count must be below expert_count", arch.c_str());
        if (groups > 1 && (n_expert % groups != 0 || group_used < 1 || group_used >= groups)) {
            return bad("%s.expert_group_count / expert_group_used_count are inconsistent", arch.c_str());
        }
    } else if (groups != 0) {
        return bad("%s.expert_group_count without experts", arch.c_str());
    }
    const kv_range gating = gguf_ints(c, key("expert_gating_func"));
    if (gating.present && gating.max > 4) {   // llama_expert_gating_func_type: NONE .. SQRT_SOFTPLUS
        return bad("%s.expert_gating_func %lld is unknown", arch.c_str(), (long long) gating.max);
    }

    // A sliding-window pattern that marks no layer: the SWA cache asserts one exists.
    const kv_range swa_pattern = gguf_ints(c, key("attention.sliding_window_pattern"));
    if (swa_pattern.present && swa_pattern.n > 1 && swa_pattern.max == 0) {
        return bad("%s.attention.sliding_window_pattern marks no layer as sliding-window", arch.c_str());
    }
    const kv_range interval = gguf_ints(c, key("full_attention_interval"));
    if (interval.present && interval.min < 1) {
        return bad("%s.full_attention_interval must be at least 1", arch.c_str());
    }

    // Norm epsilons: ggml asserts eps >= 0 (NaN included).
    for (int64_t i = 0; i < gguf_get_n_kv(c); ++i) {
        const std::string k = gguf_get_key(c, i);
        if (k.compare(0, arch.size() + 1, arch + ".") != 0 || k.find("epsilon") == std::string::npos) continue;
        const enum gguf_type t = gguf_get_kv_type(c, i);
        const double v = t == GGUF_TYPE_FLOAT32 ? gguf_get_val_f32(c, i) : t == GGUF_TYPE_FLOAT64 ? gguf_get_val_f64(c, i) : -1.0;
        if (!(v >= 0.0 && v < 1e30)) return bad("%s must be a finite non-negative float", k.c_str());
    }

    // Rope: the rotated dims and the M-RoPE sections must fit a head.
    const int64_t n_embd = gguf_ints(c, key("embedding_length")).max;
    const kv_range n_head = gguf_ints(c, key("attention.head_count"));
    const kv_range head_k = gguf_ints(c, key("attention.key_length"));
    int64_t head_dim = head_k.present ? head_k.max : (n_head.max > 0 ? n_embd / n_head.max : 0);
    // Most graphs (llama, qwen*, glm4*...) assert one head size for K and V.
    static const std::unordered_set<std::string> same_kv_head = {
        "glm4moe", "glm4", "qwen35", "qwen35moe", "qwen3next", "qwen3", "qwen3moe", "qwen2", "qwen2moe", "llama"};
    if (same_kv_head.count(arch) && n_head.max > 0) {
        const kv_range head_v = gguf_ints(c, key("attention.value_length"));
        const int64_t hv = head_v.present ? head_v.max : n_embd / n_head.max;
        if (hv != head_dim) {
            return bad("%s needs attention.value_length (%lld) = attention.key_length (%lld)", arch.c_str(),
                       (long long) hv, (long long) head_dim);
        }
    }
    // GQA: KV heads divide the query heads (ggml broadcasts K/V over them).
    const kv_range n_head_kv = gguf_ints(c, key("attention.head_count_kv"));
    if (n_head.present && n_head_kv.present && n_head_kv.max > 0) {
        if (n_head_kv.max > n_head.max || (n_head.n == 1 && n_head_kv.n == 1 && n_head.max % n_head_kv.max != 0)) {
            return bad("%s.attention.head_count_kv (%lld) must divide attention.head_count (%lld)", arch.c_str(),
                       (long long) n_head_kv.max, (long long) n_head.max);
        }
    }
    const kv_range n_rot = gguf_ints(c, key("rope.dimension_count"));
    if (n_rot.present && (n_rot.max < 2 || n_rot.max % 2 != 0 || (head_dim > 0 && n_rot.max > head_dim))) {
        return bad("%s.rope.dimension_count %lld must be even, positive and at most the head size %lld", arch.c_str(),
                   (long long) n_rot.max, (long long) head_dim);
    }
    if (arch.compare(0, 9, "deepseek2") == 0) {
        // MLA: the head is split into a rope part and a no-rope part, both non-empty.
        if (!head_k.present || !n_rot.present || !gguf_ints(c, key("attention.value_length")).present) {
            return bad("%s needs attention.key_length, attention.value_length and rope.dimension_count", arch.c_str());
        }
        const kv_range k_mla = gguf_ints(c, key("attention.key_length_mla"));
        const int64_t head_qk = k_mla.present && k_mla.max > 0 ? k_mla.max : head_k.max;
        if (n_rot.max >= head_qk) {
            return bad("%s.rope.dimension_count must be below the key head size %lld", arch.c_str(), (long long) head_qk);
        }
        const bool mla = k_mla.present && k_mla.max > 0;
        if (mla && gguf_ints(c, key("attention.head_count_kv")).max != 1) {
            return bad("%s with MLA (attention.key_length_mla) needs attention.head_count_kv = 1", arch.c_str());
        }
        // MLA's cached head is the compressed KV plus the rope part.
        const kv_range kv_lora = gguf_ints(c, key("attention.kv_lora_rank"));
        if (mla && (!kv_lora.present || head_k.max != kv_lora.max + n_rot.max ||
                    gguf_ints(c, key("attention.value_length")).max != kv_lora.max)) {
            return bad("%s with MLA needs attention.key_length = kv_lora_rank + rope.dimension_count and "
                       "attention.value_length = kv_lora_rank", arch.c_str());
        }
        // llama.cpp's MTP graph for this family asserts one block, MLA, no attention temperature:
        // any other file loads without its MTP blocks.
        const int64_t temp_id = gguf_find_key(c, key("attention.temperature_scale").c_str());
        const bool temp = temp_id >= 0 && gguf_get_kv_type(c, temp_id) == GGUF_TYPE_FLOAT32 &&
                          gguf_get_val_f32(c, temp_id) != 0.0f;
        if (n_nextn.present && n_nextn.max > 0 && (n_nextn.max != 1 || !mla || temp)) *mtp_complete = false;
    }
    const kv_range sections = gguf_ints(c, key("rope.dimension_sections"));
    if (sections.present && head_dim > 0) {
        const int64_t id = gguf_find_key(c, key("rope.dimension_sections").c_str());
        int64_t sum = 0;
        for (size_t i = 0; i < sections.n; ++i) {
            int64_t v = 0;
            gguf_int_at(c, id, gguf_get_arr_type(c, id), i, true, v);
            sum += v;
        }
        if (sum > head_dim) {
            return bad("%s.rope.dimension_sections add up to %lld, more than the head size %lld", arch.c_str(),
                       (long long) sum, (long long) head_dim);
        }
    }

    // The vocabulary: llama.cpp asserts that token strings are unique.
    const int64_t tok_id = gguf_find_key(c, "tokenizer.ggml.tokens");
    if (tok_id >= 0) {
        if (gguf_get_kv_type(c, tok_id) != GGUF_TYPE_ARRAY || gguf_get_arr_type(c, tok_id) != GGUF_TYPE_STRING) {
            return "tokenizer.ggml.tokens must be an array of strings";
        }
        const size_t n = gguf_get_arr_n(c, tok_id);
        std::unordered_set<std::string> seen;
        seen.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            if (!seen.insert(gguf_get_arr_str(c, tok_id, i)).second) {
                return bad("tokenizer.ggml.tokens has a duplicate entry at index %zu", i);
            }
        }
    }

    // Tensors the CPU reads with element-wise ops (norms, biases, scales, convolutions)
    // must be F32: any other type aborts in ggml's binary ops at the first decode
    // (converters always store 1-D tensors as F32).
    const kv_range d_inner = gguf_ints(c, key("ssm.inner_size"));
    const kv_range dt_rank = gguf_ints(c, key("ssm.time_step_rank"));
    if (d_inner.present && dt_rank.present && (dt_rank.max < 1 || d_inner.max % dt_rank.max != 0)) {
        return bad("%s.ssm.inner_size must be a multiple of ssm.time_step_rank", arch.c_str());
    }
    const int64_t n_tensors = gguf_get_n_tensors(c);
    std::vector<bool> block_has_tensors((size_t) n_layer_all, false);
    std::vector<bool> block_has_experts((size_t) n_layer_all, false), block_has_router((size_t) n_layer_all, false);
    for (int64_t i = 0; i < n_tensors; ++i) {
        const std::string name = gguf_get_tensor_name(c, i);
        const ggml_type t = gguf_get_tensor_type(c, i);
        const int64_t * ne = gguf_get_tensor_ne(c, i);
        const bool vector = ne[1] == 1 && ne[2] == 1 && ne[3] == 1;
        const bool elementwise = name.find("ssm_conv1d") != std::string::npos || ends_with(name, "ssm_a") ||
                                 ends_with(name, "ssm_d") || name.find("attn_sinks") != std::string::npos ||
                                 name.find("exp_probs_b") != std::string::npos;
        if ((vector || elementwise) && t != GGML_TYPE_F32) {
            return bad("tensor '%s' is stored as %s: llama.cpp needs F32 for it", name.c_str(), ggml_type_name(t));
        }
        // ssm.inner_size is not checked against the tensors by llama.cpp, only by the graph (an assert).
        if (d_inner.present && ends_with(name, ".ssm_out.weight") && ne[0] != d_inner.max) {
            return bad("tensor '%s' is %lld wide but %s.ssm.inner_size is %lld", name.c_str(), (long long) ne[0],
                       arch.c_str(), (long long) d_inner.max);
        }
        int blk = -1;
        if (std::sscanf(name.c_str(), "blk.%d.", &blk) == 1 && blk >= 0 && blk < n_layer_all) {
            // an MTP block counts when its eh_proj is there (llama.cpp probes the same tensor)
            if (blk < n_layer_all - (n_nextn.present ? n_nextn.max : 0) || ends_with(name, ".nextn.eh_proj.weight")) {
                block_has_tensors[(size_t) blk] = true;
            }
            if (name.find("_exps.") != std::string::npos) block_has_experts[(size_t) blk] = true;
            if (name.find(".ffn_gate_inp.") != std::string::npos) block_has_router[(size_t) blk] = true;
        }
    }
    // Every trunk block must be there: llama.cpp takes a file whose first block is missing for
    // an MTP-only file, makes the trunk optional, and crashes at the first graph.
    const int64_t n_trunk = n_layer_all - (n_nextn.present ? n_nextn.max : 0);
    for (int64_t i = 0; i < n_layer_all; ++i) {
        // experts without their router: archs that mix dense and MoE blocks make the router
        // optional, and the graph then reads a null tensor (SIGSEGV)
        if (block_has_experts[(size_t) i] && !block_has_router[(size_t) i]) {
            return bad("block %lld has expert tensors but no ffn_gate_inp router", (long long) i);
        }
        if (block_has_tensors[(size_t) i]) continue;
        if (i < n_trunk) return bad("block %lld of %lld has no tensors", (long long) i, (long long) n_trunk);
        *mtp_complete = false;
    }
    return "";
}

}  // namespace

extern "C" {

const char * pymtp_last_error(void) { return g_error.c_str(); }

const char * pymtp_build_info(void) {
    return "llama.cpp " PYMTP_LLAMA_COMMIT "; backends: " PYMTP_BACKENDS;
}

const char * pymtp_system_info(void) {
    ensure_init();
    // llama_print_system_info rebuilds one static string: serialize it, copy per thread
    static std::mutex mutex;
    static thread_local std::string info;
    std::lock_guard<std::mutex> lock(mutex);
    info = llama_print_system_info();
    while (!info.empty() && (info.back() == ' ' || info.back() == '|')) info.pop_back();
    return info.c_str();
}

void pymtp_log_set(pymtp_log_fn fn, int min_level) {
    ensure_init();
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log_fn = fn;
    g_log_min = min_level;
}

// ---- model -------------------------------------------------------------------------

int pymtp_model_load(const char * path, int load_mtp, int n_gpu_layers, pymtp_model ** out) {
    if (!path || !out) return fail(PYMTP_ERR_ARG, "path and out must not be NULL");
    *out = nullptr;
    FILE * f = std::fopen(path, "rb");
    if (!f) return fail(PYMTP_ERR_LOAD, "cannot open model file '%s': %s", path, std::strerror(errno));
    char magic[4] = {0};
    const size_t got = std::fread(magic, 1, 4, f);
    std::fclose(f);
    if (got != 4 || std::memcmp(magic, "GGUF", 4) != 0) {
        return fail(PYMTP_ERR_LOAD, "'%s' is not a GGUF file (bad magic)", path);
    }
    ensure_init();
    GUARD_BEGIN
    bool mtp_complete = true;
    const std::string why = gguf_prevalidate(path, &mtp_complete);
    if (!why.empty()) return fail(PYMTP_ERR_LOAD, "cannot load '%s': %s", path, why.c_str());
    if (!mtp_complete) load_mtp = 0;   // declared MTP blocks without tensors: load the trunk only
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = n_gpu_layers;
    mp.load_mtp = load_mtp != 0;
    {
        std::lock_guard<std::mutex> lock(g_log_mutex);
        g_log_last_error.clear();
    }
    llama_model * model = llama_model_load_from_file(path, mp);
    if (!model) {
        std::lock_guard<std::mutex> lock(g_log_mutex);
        return fail(PYMTP_ERR_LOAD, "llama.cpp could not load '%s'%s%s", path,
                    g_log_last_error.empty() ? "" : ": ", g_log_last_error.c_str());
    }
    auto * m = new pymtp_model;
    m->model = model;
    m->vocab = llama_model_get_vocab(model);
    m->mtp_loaded = load_mtp != 0 && llama_model_n_layer_nextn(model) > 0;
    track(m);
    *out = m;
    ok();
    return PYMTP_OK;
    GUARD_END
}

int pymtp_model_free(pymtp_model * m) {
    CHECK_MODEL(m);
    if (m->n_contexts > 0) {
        // Freeing the weights under a live context would crash its next decode.
        return fail(PYMTP_ERR_ARG, "model still has %d open context(s): close them first", m->n_contexts);
    }
    untrack(m);
    llama_model_free(m->model);
    delete m;
    ok();
    return PYMTP_OK;
}

int pymtp_model_get_info(const pymtp_model * m, pymtp_model_info * out) {
    CHECK_MODEL(m);
    if (!out) return fail(PYMTP_ERR_ARG, "out must not be NULL");
    GUARD_BEGIN
    std::memset(out, 0, sizeof(*out));
    if (llama_model_meta_val_str(m->model, "general.architecture", out->architecture, sizeof(out->architecture)) < 0) {
        out->architecture[0] = '\0';
    }
    llama_model_desc(m->model, out->description, sizeof(out->description));
    out->n_vocab = llama_vocab_n_tokens(m->vocab);
    out->n_embd = llama_model_n_embd_out(m->model);
    out->n_mtp_layers = llama_model_n_layer_nextn(m->model);
    out->n_layer = llama_model_n_layer(m->model);   // already excludes the MTP blocks
    out->mtp_loaded = m->mtp_loaded;
    out->n_ctx_train = llama_model_n_ctx_train(m->model);
    out->is_recurrent = llama_model_is_recurrent(m->model);
    out->is_hybrid = llama_model_is_hybrid(m->model);
    // llama.cpp grants n_rs_seq only on archs that can roll recurrent state back.
    out->rs_rollback = llm_arch_supports_rs_rollback(llm_arch_from_string(out->architecture));
    out->token_bos = llama_vocab_bos(m->vocab);
    out->token_eos = llama_vocab_eos(m->vocab);
    out->token_eot = llama_vocab_eot(m->vocab);
    out->add_bos = llama_vocab_get_add_bos(m->vocab);
    out->n_params = llama_model_n_params(m->model);
    out->size_bytes = llama_model_size(m->model);
    ok();
    return PYMTP_OK;
    GUARD_END
}

int pymtp_model_meta(const pymtp_model * m, const char * key, char * buf, int32_t buf_size) {
    CHECK_MODEL(m);
    if (!key || !buf || buf_size <= 0) return fail(PYMTP_ERR_ARG, "key and buf must be given");
    GUARD_BEGIN
    const int32_t n = llama_model_meta_val_str(m->model, key, buf, (size_t) buf_size);
    if (n < 0) return fail(PYMTP_ERR_ARG, "no metadata key '%s'", key);
    ok();
    return n;
    GUARD_END
}

int pymtp_token_is_eog(const pymtp_model * m, int32_t token) {
    CHECK_MODEL(m);
    const int32_t n_vocab = llama_vocab_n_tokens(m->vocab);
    if (token < 0 || token >= n_vocab) return fail(PYMTP_ERR_ARG, "token id %d out of range [0, %d)", token, n_vocab);
    GUARD_BEGIN
    return llama_vocab_is_eog(m->vocab, token) ? 1 : 0;
    GUARD_END
}

int pymtp_tokenize(const pymtp_model * m, const char * text, int32_t text_len, int add_special, int parse_special,
                   int32_t * out, int32_t n_max, int32_t * n_needed) {
    CHECK_MODEL(m);
    if (!text || text_len < 0 || (!out && n_max > 0) || n_max < 0) return fail(PYMTP_ERR_ARG, "bad tokenize arguments");
    GUARD_BEGIN
    const int32_t n = llama_tokenize(m->vocab, text, text_len, out, n_max, add_special != 0, parse_special != 0);
    if (n < 0) {
        if (n == INT32_MIN) return fail(PYMTP_ERR_ARG, "text too long to tokenize");
        if (n_needed) *n_needed = -n;
        return fail(PYMTP_ERR_NOSPACE, "token buffer too small: %d needed", -n);
    }
    ok();
    return n;
    GUARD_END
}

static int check_tokens(const pymtp_model * m, const int32_t * tokens, int32_t n) {
    const int32_t n_vocab = llama_vocab_n_tokens(m->vocab);
    for (int32_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab) {
            return fail(PYMTP_ERR_ARG, "token id %d at index %d out of range [0, %d)", tokens[i], i, n_vocab);
        }
    }
    return PYMTP_OK;
}

int pymtp_detokenize(const pymtp_model * m, const int32_t * tokens, int32_t n_tokens, int render_special,
                     char * buf, int32_t buf_size, int32_t * n_needed) {
    CHECK_MODEL(m);
    if (n_tokens < 0 || (n_tokens > 0 && !tokens) || buf_size < 0 || (!buf && buf_size > 0)) {
        return fail(PYMTP_ERR_ARG, "bad detokenize arguments");
    }
    if (int rc = check_tokens(m, tokens, n_tokens)) return rc;
    GUARD_BEGIN
    const int32_t n = llama_detokenize(m->vocab, tokens, n_tokens, buf, buf_size,
                                       /*remove_special*/ false, /*unparse_special*/ render_special != 0);
    if (n < 0) {
        if (n_needed) *n_needed = -n;
        return fail(PYMTP_ERR_NOSPACE, "text buffer too small: %d bytes needed", -n);
    }
    ok();
    return n;
    GUARD_END
}

int pymtp_token_piece(const pymtp_model * m, int32_t token, int render_special, char * buf, int32_t buf_size) {
    CHECK_MODEL(m);
    if (!buf || buf_size <= 0) return fail(PYMTP_ERR_ARG, "buf must be given");
    if (int rc = check_tokens(m, &token, 1)) return rc;
    GUARD_BEGIN
    const int32_t n = llama_token_to_piece(m->vocab, token, buf, buf_size, 0, render_special != 0);
    if (n < 0) return fail(PYMTP_ERR_NOSPACE, "piece buffer too small: %d bytes needed", -n);
    ok();
    return n;
    GUARD_END
}

int pymtp_chat_template(const pymtp_model * m, const char * name, const char ** out) {
    CHECK_MODEL(m);
    if (!out) return fail(PYMTP_ERR_ARG, "out must not be NULL");
    GUARD_BEGIN
    const char * t = llama_model_chat_template(m->model, name);
    if (!t) return fail(PYMTP_ERR_UNSUPPORTED, "the model has no chat template%s%s", name ? " named " : "", name ? name : "");
    *out = t;
    ok();
    return PYMTP_OK;
    GUARD_END
}

int pymtp_chat_apply(const char * tmpl, const char * const * roles, const char * const * contents, int32_t n_messages,
                     int add_assistant, char * buf, int32_t buf_size, int32_t * n_needed) {
    if (!tmpl || n_messages < 0 || (n_messages > 0 && (!roles || !contents)) || buf_size < 0 || (!buf && buf_size > 0)) {
        return fail(PYMTP_ERR_ARG, "bad chat_apply arguments");
    }
    GUARD_BEGIN
    std::vector<llama_chat_message> msgs((size_t) n_messages);
    for (int32_t i = 0; i < n_messages; ++i) {
        if (!roles[i] || !contents[i]) return fail(PYMTP_ERR_ARG, "message %d has no role or content", i);
        msgs[i] = {roles[i], contents[i]};
    }
    const int32_t n = llama_chat_apply_template(tmpl, msgs.data(), msgs.size(), add_assistant != 0, buf, buf_size);
    if (n < 0) return fail(PYMTP_ERR_UNSUPPORTED, "llama.cpp does not support this chat template");
    if (n > buf_size) {
        if (n_needed) *n_needed = n;
        return fail(PYMTP_ERR_NOSPACE, "chat buffer too small: %d bytes needed", n);
    }
    ok();
    return n;
    GUARD_END
}

// ---- contexts ----------------------------------------------------------------------

pymtp_ctx_params pymtp_ctx_default_params(void) {
    pymtp_ctx_params p;
    p.n_ctx = 4096;
    p.n_batch = 512;
    p.n_ubatch = 0;
    p.n_seq_max = 1;
    p.n_rs_seq = 0;
    p.n_threads = 0;
    p.n_threads_batch = 0;
    return p;
}

static int check_params(const pymtp_ctx_params * p) {
    if (!p) return fail(PYMTP_ERR_ARG, "params must not be NULL");
    if (p->n_batch < 1 || p->n_batch > (1u << 20)) return fail(PYMTP_ERR_ARG, "n_batch %u out of range [1, 2^20]", p->n_batch);
    if (p->n_ctx > (1u << 24)) return fail(PYMTP_ERR_ARG, "n_ctx %u too large", p->n_ctx);
    if (p->n_ubatch > p->n_batch) return fail(PYMTP_ERR_ARG, "n_ubatch %u larger than n_batch %u", p->n_ubatch, p->n_batch);
    if (p->n_seq_max < 1 || p->n_seq_max > 64) return fail(PYMTP_ERR_ARG, "n_seq_max %u out of range [1, 64]", p->n_seq_max);
    if (p->n_rs_seq > 64) return fail(PYMTP_ERR_ARG, "n_rs_seq %u too large (at most 64)", p->n_rs_seq);
    return PYMTP_OK;
}

static llama_context_params to_llama(const pymtp_ctx_params * p) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = p->n_ctx;
    cp.n_batch = p->n_batch;
    cp.n_ubatch = p->n_ubatch ? p->n_ubatch : p->n_batch;
    cp.n_seq_max = p->n_seq_max;
    cp.n_rs_seq = p->n_rs_seq;
    cp.no_perf = true;
    // llama.cpp's default is a fixed 4 threads: on fewer cores they spin against each other
    // (a tiny decode then takes milliseconds instead of tens of microseconds).
    const int32_t cores = (int32_t) std::max(1u, std::thread::hardware_concurrency());
    cp.n_threads = p->n_threads > 0 ? p->n_threads : cores;
    cp.n_threads_batch = p->n_threads_batch > 0 ? p->n_threads_batch : cp.n_threads;
    return cp;
}

static pymtp_ctx * wrap(llama_context * lctx, pymtp_model * m) {
    auto * c = new pymtp_ctx;
    c->ctx = lctx;
    c->model = m;
    c->n_ctx = llama_n_ctx(lctx);
    c->n_batch = llama_n_batch(lctx);
    c->n_seq_max = llama_n_seq_max(lctx);
    c->n_vocab = llama_vocab_n_tokens(m->vocab);
    c->n_embd = llama_model_n_embd_out(m->model);
    c->batch = llama_batch_ext_init(lctx);
    m->n_contexts++;
    track(c);
    return c;
}

int pymtp_ctx_create(pymtp_model * m, const pymtp_ctx_params * p, pymtp_ctx ** out) {
    CHECK_MODEL(m);
    if (!out) return fail(PYMTP_ERR_ARG, "out must not be NULL");
    *out = nullptr;
    if (int rc = check_params(p)) return rc;
    GUARD_BEGIN
    llama_context_params cp = to_llama(p);
    llama_context * lctx = llama_init_from_model(m->model, cp);
    if (!lctx) return fail(PYMTP_ERR_UNSUPPORTED, "llama.cpp could not create a context (n_ctx=%u, n_batch=%u)", p->n_ctx, p->n_batch);
    pymtp_ctx * c = wrap(lctx, m);
    if (m->mtp_loaded) {
        // The MTP head consumes the trunk's hidden row of every position.
        llama_set_embeddings_nextn(lctx, true, /*masked*/ false);
        c->has_hidden = true;
    }
    *out = c;
    ok();
    return PYMTP_OK;
    GUARD_END
}

int pymtp_draft_create(pymtp_ctx * target, const pymtp_ctx_params * p, pymtp_ctx ** out) {
    CHECK_CTX(target);
    if (!out) return fail(PYMTP_ERR_ARG, "out must not be NULL");
    *out = nullptr;
    if (target->is_draft) return fail(PYMTP_ERR_ARG, "a draft context binds to a target context, not to a draft");
    if (!target->model->mtp_loaded) {
        return fail(PYMTP_ERR_UNSUPPORTED, "the model has no MTP blocks loaded: nothing to draft with");
    }
    if (int rc = check_params(p)) return rc;
    GUARD_BEGIN
    llama_context_params cp = to_llama(p);
    cp.n_ctx = target->n_ctx;    // the head sees the same positions as the trunk
    cp.n_rs_seq = 0;
    cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    cp.ctx_other = target->ctx;
    llama_context * lctx = llama_init_from_model(target->model->model, cp);
    if (!lctx) return fail(PYMTP_ERR_UNSUPPORTED, "llama.cpp could not create an MTP draft context for this model");
    pymtp_ctx * c = wrap(lctx, target->model);
    c->is_draft = true;
    c->target = target;
    c->has_hidden = true;
    c->shares_memory = llama_get_ctx_other(lctx) == target->ctx;
    llama_set_embeddings_nextn(lctx, true, /*masked*/ true);
    target->n_drafts++;
    *out = c;
    ok();
    return PYMTP_OK;
    GUARD_END
}

int pymtp_ctx_free(pymtp_ctx * c) {
    CHECK_CTX(c);
    if (c->n_drafts > 0) return fail(PYMTP_ERR_ARG, "free the %d draft context(s) bound to this target first", c->n_drafts);
    untrack(c);
    if (c->target) c->target->n_drafts--;
    c->model->n_contexts--;
    llama_batch_ext_free(c->batch);
    llama_free(c->ctx);
    delete c;
    ok();
    return PYMTP_OK;
}

int pymtp_ctx_get_info(const pymtp_ctx * c, pymtp_ctx_info * out) {
    CHECK_CTX(c);
    if (!out) return fail(PYMTP_ERR_ARG, "out must not be NULL");
    out->n_ctx = c->n_ctx;
    out->n_batch = c->n_batch;
    out->n_rs_seq = llama_n_rs_seq(c->ctx);
    out->n_vocab = c->n_vocab;
    out->n_embd = c->n_embd;
    out->is_draft = c->is_draft;
    out->n_threads = llama_n_threads(c->ctx);
    ok();
    return PYMTP_OK;
}

int pymtp_ctx_set_threads(pymtp_ctx * c, int32_t n_threads, int32_t n_threads_batch) {
    CHECK_CTX(c);
    if (n_threads < 1 || n_threads > 1024 || n_threads_batch < 1 || n_threads_batch > 1024) {
        return fail(PYMTP_ERR_ARG, "thread counts must be in [1, 1024]");
    }
    llama_set_n_threads(c->ctx, n_threads, n_threads_batch);
    ok();
    return PYMTP_OK;
}

int pymtp_draft_set_head(pymtp_ctx * c, int32_t head) {
    CHECK_CTX(c);
    if (!c->is_draft) return fail(PYMTP_ERR_ARG, "only a draft context has MTP heads to choose from");
    const int32_t n = llama_model_n_layer_nextn(c->model->model);
    if (head < 0 || head >= n) return fail(PYMTP_ERR_ARG, "MTP head %d out of range [0, %d)", head, n);
    llama_set_nextn_layer_offset(c->ctx, head);
    ok();
    return PYMTP_OK;
}

int pymtp_decode(pymtp_ctx * c, const int32_t * tokens, int32_t n_tokens, int32_t pos0, int32_t seq_id,
                 const uint8_t * output, const float * hidden_first, const float * hidden_rest) {
    CHECK_CTX(c);
    if (!tokens) return fail(PYMTP_ERR_ARG, "tokens must not be NULL");
    if (n_tokens < 1 || (uint32_t) n_tokens > c->n_batch) {
        return fail(PYMTP_ERR_ARG, "batch of %d tokens: must be in [1, n_batch=%u]", n_tokens, c->n_batch);
    }
    if (seq_id < 0 || (uint32_t) seq_id >= c->n_seq_max) {
        return fail(PYMTP_ERR_ARG, "seq_id %d out of range [0, %u)", seq_id, c->n_seq_max);
    }
    if (pos0 < 0 || (int64_t) pos0 + n_tokens > (int64_t) c->n_ctx) {
        return fail(PYMTP_ERR_ARG, "positions [%d, %d) do not fit the context (n_ctx=%u)", pos0, pos0 + n_tokens, c->n_ctx);
    }
    if (int rc = check_tokens(c->model, tokens, n_tokens)) return rc;
    if (c->is_draft) {
        if (!hidden_first || (n_tokens > 1 && !hidden_rest)) {
            return fail(PYMTP_ERR_ARG, "a draft decode pairs every token with a target hidden row: hidden rows missing");
        }
    } else if (hidden_first || hidden_rest) {
        return fail(PYMTP_ERR_ARG, "hidden rows are inputs of draft contexts only");
    }
    GUARD_BEGIN
    if (!c->shares_memory) {
        const llama_pos pmax = llama_memory_seq_pos_max(llama_get_memory(c->ctx), seq_id);
        if (pmax >= 0 && pos0 != pmax + 1) {
            return fail(PYMTP_ERR_ARG, "position %d does not continue sequence %d (it ends at %d): remove positions first",
                        pos0, seq_id, pmax);
        }
    }
    llama_batch_ext * b = c->batch;
    llama_batch_ext_clear(b);
    int32_t n_out = 0;
    for (int32_t i = 0; i < n_tokens; ++i) {
        const int32_t idx = llama_batch_ext_add_token(b, seq_id, tokens[i]);
        if (idx < 0) return fail(PYMTP_ERR_ARG, "llama.cpp refused batch row %d (code %d)", i, idx);
        const llama_pos pos = pos0 + i;
        llama_batch_ext_set_pos(b, idx, &pos);
        const bool want = output ? output[i] != 0 : true;
        llama_batch_ext_set_output_logits(b, idx, want);
        n_out += want;
        if (c->is_draft) {
            const float * h = i == 0 ? hidden_first : hidden_rest + (size_t) (i - 1) * c->n_embd;
            llama_batch_ext_set_embd_token(b, idx, llama_embd{h, 1, (size_t) c->n_embd});
        }
    }
    c->last_tokens = 0;
    c->last_outputs = 0;
    const int32_t rc = llama_process(c->ctx, LLAMA_PROCESS_TYPE_DECODE, b);
    if (rc != 0) {
        const char * why = rc == 1 ? "no KV cache slot for the batch (context full)"
                         : rc == 2 ? "aborted"
                         : rc == -1 ? "invalid batch"
                         : "fatal error (the sequence may hold part of the batch)";
        return fail(PYMTP_ERR_DECODE, "decode failed: %s (code %d)", why, rc);
    }
    c->last_tokens = n_tokens;
    c->last_outputs = n_out;
    c->last_batch = n_tokens;
    ok();
    return PYMTP_OK;
    GUARD_END
}

int pymtp_logits(pymtp_ctx * c, float ** out, int32_t * n_rows) {
    CHECK_CTX(c);
    if (!out || !n_rows) return fail(PYMTP_ERR_ARG, "out and n_rows must not be NULL");
    *out = nullptr;
    *n_rows = 0;
    if (c->last_outputs == 0) return fail(PYMTP_ERR_ARG, "no logits: the last decode asked for none (or failed)");
    GUARD_BEGIN
    float * p = llama_get_logits(c->ctx);
    if (!p) return fail(PYMTP_ERR_DECODE, "llama.cpp returned no logits");
    *out = p;
    *n_rows = c->last_outputs;
    ok();
    return PYMTP_OK;
    GUARD_END
}

int pymtp_hidden(pymtp_ctx * c, float ** out, int32_t * n_rows) {
    CHECK_CTX(c);
    if (!out || !n_rows) return fail(PYMTP_ERR_ARG, "out and n_rows must not be NULL");
    *out = nullptr;
    *n_rows = 0;
    if (!c->has_hidden) return fail(PYMTP_ERR_UNSUPPORTED, "this context has no hidden rows (the model was loaded without MTP blocks)");
    const int32_t n = c->is_draft ? c->last_outputs : c->last_tokens;
    if (n == 0) return fail(PYMTP_ERR_ARG, "no hidden rows: nothing decoded yet (or the last decode failed)");
    GUARD_BEGIN
    float * p = llama_get_embeddings_nextn(c->ctx);
    if (!p) return fail(PYMTP_ERR_DECODE, "llama.cpp returned no hidden rows");
    *out = p;
    *n_rows = n;
    ok();
    return PYMTP_OK;
    GUARD_END
}

int pymtp_rows_argmax(const float * rows, int32_t n_rows, int32_t n_cols, int32_t * out_ids, float * out_prob) {
    if (!rows || !out_ids || n_rows < 0 || n_cols < 1) return fail(PYMTP_ERR_ARG, "bad rows_argmax arguments");
    for (int32_t r = 0; r < n_rows; ++r) {
        const float * x = rows + (size_t) r * n_cols;
        int32_t best = 0;
        for (int32_t j = 1; j < n_cols; ++j) {
            if (x[j] > x[best]) best = j;
        }
        out_ids[r] = best;
        if (out_prob) {
            double sum = 0.0;
            const float mx = x[best];
            for (int32_t j = 0; j < n_cols; ++j) sum += std::exp((double) (x[j] - mx));
            out_prob[r] = (float) (1.0 / sum);
        }
    }
    ok();
    return PYMTP_OK;
}

int pymtp_draft_greedy(pymtp_ctx * c, int32_t pos, int32_t n_max, float p_min, int32_t * out_tokens,
                       float * out_probs) {
    CHECK_CTX(c);
    if (!c->is_draft) return fail(PYMTP_ERR_ARG, "greedy drafting runs on a draft context");
    if (!out_tokens || !out_probs || n_max < 1 || n_max > 64) return fail(PYMTP_ERR_ARG, "bad draft_greedy arguments");
    if (c->last_outputs < 1) return fail(PYMTP_ERR_ARG, "no draft logits: decode the draft context first");
    int32_t n = 0;
    for (;;) {
        float * row = nullptr;
        {
            GUARD_BEGIN
            row = llama_get_logits(c->ctx);
            GUARD_END
        }
        if (!row) return fail(PYMTP_ERR_DECODE, "llama.cpp returned no logits");
        row += (size_t) (c->last_outputs - 1) * c->n_vocab;
        int32_t tok = 0;
        float prob = 0.0f;
        pymtp_rows_argmax(row, 1, c->n_vocab, &tok, &prob);
        if (prob < p_min) break;
        out_tokens[n] = tok;
        out_probs[n] = prob;
        if (++n == n_max) break;
        const float * h = nullptr;
        {
            GUARD_BEGIN
            h = llama_get_embeddings_nextn(c->ctx);
            GUARD_END
        }
        if (!h) return fail(PYMTP_ERR_DECODE, "llama.cpp returned no hidden rows");
        // Copy: the next decode rewrites the buffer the row lives in.
        h += (size_t) (c->last_outputs - 1) * c->n_embd;
        c->own_row.assign(h, h + c->n_embd);
        if (int rc = pymtp_decode(c, &tok, 1, pos + n - 1, 0, nullptr, c->own_row.data(), nullptr)) return rc;
    }
    ok();
    return n;
}

// ---- memory ---------------------------------------------------------------------------

static int check_seq(const pymtp_ctx * c, int32_t seq_id) {
    if (seq_id < 0 || (uint32_t) seq_id >= c->n_seq_max) {
        return fail(PYMTP_ERR_ARG, "seq_id %d out of range [0, %u)", seq_id, c->n_seq_max);
    }
    return PYMTP_OK;
}

int pymtp_seq_rm(pymtp_ctx * c, int32_t seq_id, int32_t p0, int32_t p1) {
    CHECK_CTX(c);
    if (int rc = check_seq(c, seq_id)) return rc;
    if (p0 < 0 || (p1 >= 0 && p1 < p0)) return fail(PYMTP_ERR_ARG, "bad position range [%d, %d)", p0, p1);
    GUARD_BEGIN
    llama_memory_t mem = llama_get_memory(c->ctx);
    const llama_pos pmax = llama_memory_seq_pos_max(mem, seq_id);
    const bool partial = p0 > 0 && p0 <= pmax && (p1 < 0 || p1 > pmax);
    const bool recurrent = llama_model_is_recurrent(c->model->model) || llama_model_is_hybrid(c->model->model);
    if (partial && recurrent && !c->is_draft) {   // an MTP head's own memory is plain KV
        // llama.cpp keeps recurrent snapshots for the tokens of the last decode only: the state
        // before that decode is not among them, and a deeper rollback would restore garbage.
        const int32_t depth = pmax - p0 + 1;
        if (depth >= c->last_batch) {
            return fail(PYMTP_ERR_UNSUPPORTED,
                        "cannot remove positions [%d, %d) of sequence %d: recurrent state can roll back at most "
                        "%d token(s) of the last decode (use a checkpoint for more)", p0, p1, seq_id,
                        std::max(0, c->last_batch - 1));
        }
    }
    c->last_tokens = c->last_outputs = 0;   // rows of the last decode may describe removed positions
    if (!llama_memory_seq_rm(mem, seq_id, p0, p1)) {
        return fail(PYMTP_ERR_UNSUPPORTED,
                    "cannot remove positions [%d, %d) of sequence %d: recurrent state cannot be cut there "
                    "(use n_rs_seq snapshots or a checkpoint)", p0, p1, seq_id);
    }
    ok();
    return PYMTP_OK;
    GUARD_END
}

int pymtp_seq_cp(pymtp_ctx * c, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    CHECK_CTX(c);
    if (int rc = check_seq(c, src)) return rc;
    if (int rc = check_seq(c, dst)) return rc;
    GUARD_BEGIN
    llama_memory_seq_cp(llama_get_memory(c->ctx), src, dst, p0, p1);
    ok();
    return PYMTP_OK;
    GUARD_END
}

int pymtp_seq_pos_max(pymtp_ctx * c, int32_t seq_id, int32_t * out) {
    CHECK_CTX(c);
    if (!out) return fail(PYMTP_ERR_ARG, "out must not be NULL");
    if (int rc = check_seq(c, seq_id)) return rc;
    GUARD_BEGIN
    *out = llama_memory_seq_pos_max(llama_get_memory(c->ctx), seq_id);
    ok();
    return PYMTP_OK;
    GUARD_END
}

int pymtp_checkpoint_save(pymtp_ctx * c, int32_t seq_id) {
    CHECK_CTX(c);
    if (int rc = check_seq(c, seq_id)) return rc;
    GUARD_BEGIN
    const auto flags = LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY;
    const size_t need = llama_state_seq_get_size_ext(c->ctx, seq_id, flags);
    if (need > c->checkpoint.size()) c->checkpoint.resize(need);
    const size_t n = llama_state_seq_get_data_ext(c->ctx, c->checkpoint.data(), c->checkpoint.size(), seq_id, flags);
    if (n == 0 && need != 0) return fail(PYMTP_ERR_DECODE, "could not save the state of sequence %d", seq_id);
    c->checkpoint_size = n;
    c->checkpoint_seq = seq_id;
    ok();
    return PYMTP_OK;
    GUARD_END
}

int pymtp_checkpoint_restore(pymtp_ctx * c, int32_t seq_id) {
    CHECK_CTX(c);
    if (int rc = check_seq(c, seq_id)) return rc;
    if (c->checkpoint_seq != seq_id) return fail(PYMTP_ERR_ARG, "no checkpoint saved for sequence %d", seq_id);
    GUARD_BEGIN
    const size_t n = llama_state_seq_set_data_ext(c->ctx, c->checkpoint.data(), c->checkpoint_size, seq_id,
                                                  LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    if (n == 0 && c->checkpoint_size != 0) return fail(PYMTP_ERR_DECODE, "could not restore the state of sequence %d", seq_id);
    c->last_tokens = c->last_outputs = 0;
    c->last_batch = INT32_MAX;             // the restored state stands before every later position
    ok();
    return PYMTP_OK;
    GUARD_END
}

}  // extern "C"

// ---- files -------------------------------------------------------------------------

int pymtp_quantize(const char * src, const char * dst, int32_t ftype,
                   const char * const * patterns, const int32_t * types, int32_t n_overrides,
                   int32_t allow_requantize, int32_t n_threads) {
    if (!src || !dst) return fail(PYMTP_ERR_ARG, "src and dst must not be NULL");
    if (std::strcmp(src, dst) == 0) return fail(PYMTP_ERR_ARG, "src and dst must differ");
    if (n_overrides < 0 || n_overrides > 64) return fail(PYMTP_ERR_ARG, "n_overrides must be in [0, 64]");
    if (n_overrides > 0 && (!patterns || !types)) return fail(PYMTP_ERR_ARG, "patterns and types must not be NULL");
    if (ftype < 0 || ftype >= LLAMA_FTYPE_GUESSED) return fail(PYMTP_ERR_ARG, "unknown ftype %d", ftype);
    for (int32_t i = 0; i < n_overrides; ++i) {
        if (!patterns[i]) return fail(PYMTP_ERR_ARG, "pattern %d is NULL", i);
        if (types[i] < 0 || types[i] >= GGML_TYPE_COUNT || ggml_type_size((ggml_type) types[i]) == 0) {
            return fail(PYMTP_ERR_ARG, "pattern %d: unknown ggml type %d", i, types[i]);
        }
    }
    ensure_init();
    GUARD_BEGIN
    bool mtp_complete = true;
    const std::string why = gguf_prevalidate(src, &mtp_complete);
    if (!why.empty()) return fail(PYMTP_ERR_LOAD, "cannot read '%s': %s", src, why.c_str());
    std::vector<llama_model_tensor_override> tt;
    for (int32_t i = 0; i < n_overrides; ++i) tt.push_back({patterns[i], (ggml_type) types[i]});
    tt.push_back({nullptr, GGML_TYPE_COUNT});
    llama_model_quantize_params qp = llama_model_quantize_default_params();
    qp.ftype = (llama_ftype) ftype;
    qp.nthread = n_threads;
    qp.allow_requantize = allow_requantize != 0;
    qp.tt_overrides = n_overrides > 0 ? tt.data() : nullptr;
    {
        std::lock_guard<std::mutex> lock(g_log_mutex);
        g_log_last_error.clear();
    }
    if (llama_model_quantize(src, dst, &qp) != 0) {
        std::lock_guard<std::mutex> lock(g_log_mutex);
        return fail(PYMTP_ERR_LOAD, "llama.cpp could not quantize '%s'%s%s", src,
                    g_log_last_error.empty() ? "" : ": ", g_log_last_error.c_str());
    }
    ok();
    return PYMTP_OK;
    GUARD_END
}
