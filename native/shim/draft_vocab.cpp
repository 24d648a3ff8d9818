// draft_vocab.cpp: a trimmed draft vocabulary (FastMTP): the MTP head scores only N chosen
// tokens instead of the whole vocabulary.
//
// The head's output projection (n_vocab x n_embd) is most of a draft token's cost. Without
// patching llama.cpp's graphs: the draft decode asks llama.cpp for no logits (so its graph
// projects zero rows), an eval callback copies the head's last hidden row (the graph node
// named "h_nextn", the normed row the projection reads), and a small ggml graph multiplies
// it with a copy of the N chosen rows of the head matrix. The logits of the other tokens
// read -inf: q is zero there, which rejection sampling covers (the residual) and greedy
// verification never needs.
//
// The copy keeps the head matrix's own type where this CPU multiplies it (its rows are copied
// byte for byte): the fewest bytes a draft token reads (a Q6_K head: 0.82 bytes a weight,
// against 2 for an F16 copy), and each chosen logit bitwise the one the whole projection gives
// (the same blocks through the same kernel). F32 and types without a CPU dot product are
// converted to F16.

#include "shim_internal.h"

#include "ggml.h"
#include "ggml-cpu.h"
#include "ggml-backend.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

struct draft_capture {
    bool active = false;       // capture on the next decodes
    bool captured = false;     // the last decode delivered the rows
    int32_t n_embd = 0;
    int32_t n_tokens = 0;      // rows of the batch (0: whatever the ubatch holds; the last is captured)
    std::vector<int32_t> idx;  // the batch rows to capture (empty: the last one)
    std::vector<float> rows;   // their hidden rows, in that order
};

struct draft_vocab {
    int32_t n_vocab = 0, n_embd = 0, n = 0;
    std::vector<int32_t> ids;
    std::vector<uint8_t> work;
    ggml_context * ctx = nullptr;
    ggml_tensor * w = nullptr;          // [n_embd, n]: the chosen rows of the head matrix (its type, or F16)
    ggml_tensor * h = nullptr;          // [n_embd, 1] F32
    ggml_tensor * out = nullptr;        // [n, 1] F32
    ggml_cgraph * graph = nullptr;
    int32_t n_threads = 0;
    ggml_cplan plan{};

    ~draft_vocab() {
        if (ctx) ggml_free(ctx);
    }
};

draft_capture * draft_capture_new(int32_t n_embd) {
    auto * c = new (std::nothrow) draft_capture();
    if (c) {
        c->n_embd = n_embd;
        c->rows.assign(n_embd, 0.0f);
    }
    return c;
}

void draft_capture_free(draft_capture * c) { delete c; }

void draft_capture_arm(draft_capture * c, bool on) {
    c->active = on;
    c->captured = false;
    c->n_tokens = 0;
    c->idx.clear();
}

bool draft_capture_arm_rows(draft_capture * c, int32_t n_tokens, const int32_t * idx, int32_t m) {
    try {
        if (c->rows.size() < (size_t) m * c->n_embd) c->rows.resize((size_t) m * c->n_embd);   // grows once
        c->idx.assign(idx, idx + m);
    } catch (const std::bad_alloc &) {
        return false;
    }
    c->active = true;
    c->captured = false;
    c->n_tokens = n_tokens;
    return true;
}

bool draft_capture_done(const draft_capture * c) { return c->captured; }

const float * draft_capture_row(const draft_capture * c) { return c->rows.data(); }

int32_t draft_capture_count(const draft_capture * c) { return c->idx.empty() ? 1 : (int32_t) c->idx.size(); }

bool draft_capture_cb(ggml_tensor * t, bool ask, void * user_data) {
    auto * c = static_cast<draft_capture *>(user_data);
    if (!c->active || std::strcmp(ggml_get_name(t), "h_nextn") != 0) return false;
    if (ask) return true;
    // rows of h_nextn: one per token of the ubatch (graphs that cut it to the output rows,
    // zero here, cannot serve a trimmed vocabulary: nothing is captured and the decode fails)
    if (t->type != GGML_TYPE_F32 || t->ne[0] != c->n_embd || t->ne[1] < 1) return true;
    if (c->idx.empty()) {
        ggml_backend_tensor_get(t, c->rows.data(), (size_t) (t->ne[1] - 1) * t->nb[1], sizeof(float) * c->n_embd);
        c->captured = true;
        return true;
    }
    // chosen rows of a batch that must sit in one ubatch (else nothing is captured)
    if (t->ne[1] != c->n_tokens) return true;
    for (size_t k = 0; k < c->idx.size(); ++k) {
        ggml_backend_tensor_get(t, c->rows.data() + k * c->n_embd, (size_t) c->idx[k] * t->nb[1],
                                sizeof(float) * c->n_embd);
    }
    c->captured = true;
    return true;
}

// Whether the chosen rows are copied as they are: F16, or a type this CPU has a dot product
// for (an F32 head is halved to F16: its draft tokens read half the bytes).
static bool rows_copy_as_they_are(const ggml_tensor * head) {
    if (head->type == GGML_TYPE_F16) return true;
    if (head->type == GGML_TYPE_F32) return false;
    const auto * cpu = ggml_get_type_traits_cpu(head->type);
    return cpu && cpu->vec_dot && cpu->vec_dot_type != GGML_TYPE_COUNT && head->nb[1] == ggml_row_size(head->type, head->ne[0]);
}

draft_vocab * draft_vocab_new(const ggml_tensor * head, const int32_t * ids, int32_t n, int32_t n_vocab,
                              int32_t n_threads, const char ** why) {
    if (head->ne[1] != n_vocab) {
        *why = "the head matrix is not n_vocab rows";
        return nullptr;
    }
    if (head->extra) {
        // repacked for this CPU (interleaved rows): its buffer cannot be read back
        *why = "the head matrix is repacked for this CPU";
        return nullptr;
    }
    const auto * traits = ggml_get_type_traits(head->type);
    const bool as_is = rows_copy_as_they_are(head);
    if (!as_is && head->type != GGML_TYPE_F32 && !traits->to_float) {
        *why = "the head matrix's type cannot be read as floats";
        return nullptr;
    }
    auto * v = new (std::nothrow) draft_vocab();
    if (!v) {
        *why = "out of memory";
        return nullptr;
    }
    try {
        v->n_vocab = n_vocab;
        v->n_embd = (int32_t) head->ne[0];
        v->n = n;
        v->ids.assign(ids, ids + n);
        const ggml_type type = as_is ? head->type : GGML_TYPE_F16;
        const size_t row = ggml_row_size(type, v->n_embd);
        const size_t mem = ggml_tensor_overhead() * 4 + ggml_graph_overhead() + row * n + (size_t) v->n_embd * 4 +
                           (size_t) n * 4 + 4096;
        ggml_init_params ip = {mem, nullptr, false};
        v->ctx = ggml_init(ip);
        if (!v->ctx) throw std::bad_alloc();
        v->w = ggml_new_tensor_2d(v->ctx, type, v->n_embd, n);
        v->h = ggml_new_tensor_2d(v->ctx, GGML_TYPE_F32, v->n_embd, 1);
        v->out = ggml_mul_mat(v->ctx, v->w, v->h);
        v->graph = ggml_new_graph(v->ctx);
        ggml_build_forward_expand(v->graph, v->out);
        auto * dst = static_cast<uint8_t *>(v->w->data);
        if (as_is) {
            for (int32_t i = 0; i < n; ++i) {
                ggml_backend_tensor_get(head, dst + (size_t) i * row, (size_t) ids[i] * head->nb[1], row);
            }
        } else {
            std::vector<uint8_t> raw(head->nb[1]);
            std::vector<float> f(v->n_embd);
            for (int32_t i = 0; i < n; ++i) {
                ggml_backend_tensor_get(head, raw.data(), (size_t) ids[i] * head->nb[1], head->nb[1]);
                if (head->type == GGML_TYPE_F32) {
                    std::memcpy(f.data(), raw.data(), sizeof(float) * v->n_embd);
                } else {
                    traits->to_float(raw.data(), f.data(), v->n_embd);
                }
                ggml_fp32_to_fp16_row(f.data(), reinterpret_cast<ggml_fp16_t *>(dst + (size_t) i * row), v->n_embd);
            }
        }
        v->n_threads = std::max(1, n_threads);
        v->plan = ggml_graph_plan(v->graph, v->n_threads, nullptr);
        v->work.resize(v->plan.work_size + 1);
        v->plan.work_data = v->work.data();
    } catch (const std::bad_alloc &) {
        delete v;
        *why = "out of memory for the trimmed head";
        return nullptr;
    }
    return v;
}

void draft_vocab_free(draft_vocab * v) { delete v; }

int32_t draft_vocab_size(const draft_vocab * v) { return v->n; }

// The logits of the chosen tokens for one hidden row, written into the n_vocab-wide row out
// (whose other entries the caller keeps at -inf).
bool draft_vocab_logits_into(draft_vocab * v, const float * hidden, float * out) {
    std::memcpy(v->h->data, hidden, sizeof(float) * v->n_embd);
    if (ggml_graph_compute(v->graph, &v->plan) != GGML_STATUS_SUCCESS) return false;
    const float * o = static_cast<const float *>(v->out->data);
    for (int32_t i = 0; i < v->n; ++i) out[v->ids[i]] = o[i];
    return true;
}
