// gguf_check.cpp: refusing corrupt GGUF files before llama.cpp sees them (see gguf_check.h).
//
// llama.cpp checks most of a GGUF, but a few corruptions reach a GGML_ASSERT / GGML_ABORT
// (load_hparams' layer and expert counts, duplicate vocabulary entries) or an abort at the
// first decode (an unknown expert gating function, rope sections wider than a head, a norm
// stored in a type the CPU's binary ops cannot read). An abort would take the Python process
// down, so these files are refused here first, with ggml's own parser (metadata only).
// The list comes from fuzzing (tools/fuzz_campaign.py); see tests/test_fuzz.py.

#include "gguf_check.h"

#include "ggml.h"
#include "gguf.h"         // ggml's GGUF reader (metadata only)
#include "llama-arch.h"   // internal, reachable because libllama is linked statically

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

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

}  // namespace

namespace pymtp_shim {

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

}  // namespace pymtp_shim
