// pymtp.cpp: the C shim over llama.cpp. See pymtp.h for the contract.
//
// Every entry point checks its handles and arguments first, then calls
// llama.cpp inside a try block: llama.cpp asserts (abort) on some bad input and
// throws C++ exceptions on other, and neither may reach the Python process.

#pragma GCC visibility push(default)
#include "pymtp.h"
#pragma GCC visibility pop
#include "gguf_check.h"   // refuses corrupt GGUF files before llama.cpp would abort on them
#include "shim_internal.h"
#include "backends.h"

#include "llama.h"
#include "llama-ext.h"
#include "llama-arch.h"   // internal, reachable because libllama is linked statically
#include "llama-model.h"  // internal: the head matrix a trimmed draft vocabulary copies rows of

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
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
    bool failed = false;           // a remote (RPC) backend failed: every later decode is refused
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
    std::vector<float> own_row;    // the head's hidden rows fed back by pymtp_draft_greedy
    // pymtp_checkpoint_save's copy of each sequence's recurrent state (size 0: none saved)
    std::vector<std::vector<uint8_t>> checkpoint;
    std::vector<size_t> checkpoint_size;
    draft_capture * capture = nullptr;    // draft contexts: the head's hidden row, when trimmed
    draft_vocab * vocab = nullptr;        // draft contexts: the trimmed vocabulary, or none
    const float * trim_row = nullptr;     // the last decode's logits rows under the trimmed vocabulary
    int32_t trim_n = 0;                   // how many
    std::vector<float> trim_rows;         // pymtp_decode_rows' trimmed logits (-inf outside the ids)
    std::vector<int32_t> trim_idx;        // the batch rows they belong to
    bool hidden_on = true;                // draft contexts: llama.cpp extracts hidden rows (embeddings_nextn)
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

void shim_set_error(const char * msg) {
    if (msg) {
        g_error = msg;
    } else {
        g_error.clear();
    }
}

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
// As GUARD_END, and an error of a remote backend marks the model failed (its memory on that
// server is gone; llama.cpp's scheduler state after it is not to be trusted).
#define GUARD_END_MODEL(m)                                                        \
    } catch (const std::exception & e) {                                          \
        if (std::strstr(e.what(), "RPC server")) (m)->failed = true;              \
        return fail(PYMTP_ERR_DECODE, "llama.cpp raised: %s", e.what());          \
    } catch (...) {                                                               \
        return fail(PYMTP_ERR_DECODE, "llama.cpp raised an unknown exception");   \
    }
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
        shim_load_backends();  // backends.h: a portable build's backend libraries
        llama_backend_init();
    });
}

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

pymtp_load_params pymtp_load_default_params(void) {
    pymtp_load_params p = {};
    p.load_mtp = 1;
    p.n_gpu_layers = -1;
    p.mtp_local = 1;
    return p;
}

int pymtp_model_failed(const pymtp_model * m) {
    CHECK_MODEL(m);
    return m->failed ? 1 : 0;
}

int pymtp_model_load(const char * path, int load_mtp, int n_gpu_layers, pymtp_model ** out) {
    pymtp_load_params p = pymtp_load_default_params();
    p.load_mtp = load_mtp;
    p.n_gpu_layers = n_gpu_layers;
    return pymtp_model_load_ext(path, &p, out);
}

int pymtp_model_load_ext(const char * path, const pymtp_load_params * params, pymtp_model ** out) {
    if (!path || !out || !params) return fail(PYMTP_ERR_ARG, "path, params and out must not be NULL");
    int load_mtp = params->load_mtp;
    const bool remote = params->rpc_servers && params->rpc_servers[0];
    if (params->n_tensor_split < 0 || (size_t) params->n_tensor_split > llama_max_devices() ||
        (params->n_tensor_split > 0 && !params->tensor_split)) {
        return fail(PYMTP_ERR_ARG, "tensor_split: %d values given, at most %zu devices", params->n_tensor_split,
                    llama_max_devices());
    }
    for (int32_t i = 0; i < params->n_tensor_split; ++i) {
        if (!(params->tensor_split[i] >= 0.0f) || !std::isfinite(params->tensor_split[i])) {
            return fail(PYMTP_ERR_ARG, "tensor_split[%d] must be a finite share >= 0", i);
        }
    }
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
    const std::string why = pymtp_shim::gguf_prevalidate(path, &mtp_complete);
    if (!why.empty()) return fail(PYMTP_ERR_LOAD, "cannot load '%s': %s", path, why.c_str());
    if (!mtp_complete) load_mtp = 0;   // declared MTP blocks without tensors: load the trunk only
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = params->n_gpu_layers;
    mp.load_mtp = load_mtp != 0;
    std::vector<ggml_backend_dev_t> devices;
    std::vector<float> split(llama_max_devices(), 0.0f);
    if (remote) {
        const std::string why = placement_rpc_devices(params->rpc_servers, devices);
        if (!why.empty()) return fail(PYMTP_ERR_LOAD, "cannot use the RPC servers: %s", why.c_str());
        if ((size_t) params->n_tensor_split > devices.size()) {
            return fail(PYMTP_ERR_ARG, "tensor_split has %d values for %zu devices", params->n_tensor_split, devices.size());
        }
        devices.push_back(nullptr);
        mp.devices = devices.data();
        if (params->n_tensor_split > 0) {
            std::copy(params->tensor_split, params->tensor_split + params->n_tensor_split, split.begin());
            mp.tensor_split = split.data();
        }
        mp.mtp_local = params->mtp_local != 0;   // patch 0002: MTP layers and output head on the CPU
    }
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
    out->n_swa = llama_model_n_swa(m->model);
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
    // Several sequences share one pool of n_ctx cells (each may grow to n_ctx positions),
    // and llama.cpp keeps a multi-sequence batch in order inside a ubatch.
    cp.kv_unified = p->n_seq_max > 1;
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
    c->checkpoint.resize(c->n_seq_max);
    c->checkpoint_size.assign(c->n_seq_max, 0);
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
    // The eval callback stays idle until a trimmed vocabulary arms it (pymtp_draft_set_vocab).
    draft_capture * capture = draft_capture_new(target->n_embd);
    if (!capture) return fail(PYMTP_ERR_NOSPACE, "out of memory");
    cp.cb_eval = draft_capture_cb;
    cp.cb_eval_user_data = capture;
    llama_context * lctx = llama_init_from_model(target->model->model, cp);
    if (!lctx) {
        draft_capture_free(capture);
        return fail(PYMTP_ERR_UNSUPPORTED, "llama.cpp could not create an MTP draft context for this model");
    }
    pymtp_ctx * c = wrap(lctx, target->model);
    c->capture = capture;
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
    if (c->vocab) draft_vocab_free(c->vocab);
    if (c->capture) draft_capture_free(c->capture);
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

int pymtp_draft_set_vocab(pymtp_ctx * c, const int32_t * ids, int32_t n) {
    CHECK_CTX(c);
    if (!c->is_draft) return fail(PYMTP_ERR_ARG, "a trimmed vocabulary belongs to a draft context");
    if (n < 0 || n > c->n_vocab || (n > 0 && !ids)) return fail(PYMTP_ERR_ARG, "bad trimmed vocabulary (n=%d)", n);
    for (int32_t i = 0; i < n; ++i) {
        if (ids[i] < 0 || ids[i] >= c->n_vocab || (i > 0 && ids[i] <= ids[i - 1])) {
            return fail(PYMTP_ERR_ARG, "trimmed vocabulary: ids must be ascending token ids (index %d: %d)", i, ids[i]);
        }
    }
    GUARD_BEGIN
    c->trim_rows.clear();      // refilled with -inf for the next ids
    if (c->vocab) {
        draft_vocab_free(c->vocab);
        c->vocab = nullptr;
    }
    draft_capture_arm(c->capture, false);
    c->last_tokens = c->last_outputs = 0;
    if (n == 0) {
        ok();
        return PYMTP_OK;
    }
    const llama_model * lm = c->model->model;
    if (c->shares_memory) return fail(PYMTP_ERR_UNSUPPORTED, "a draft that shares the target's KV cannot trim its vocabulary");
    if (llama_model_n_layer_nextn(lm) != 1) {
        return fail(PYMTP_ERR_UNSUPPORTED, "a trimmed draft vocabulary needs a model with one MTP block");
    }
    const llama_layer * head_layer = nullptr;
    for (const auto & layer : lm->layers) {
        if (layer.nextn.eh_proj) head_layer = &layer;
    }
    if (!head_layer) return fail(PYMTP_ERR_UNSUPPORTED, "no MTP block found in the model");
    const ggml_tensor * w = head_layer->nextn.shared_head_head ? head_layer->nextn.shared_head_head : lm->output;
    const ggml_tensor * s = head_layer->nextn.shared_head_head ? head_layer->nextn.shared_head_head_s : lm->output_s;
    if (!w) return fail(PYMTP_ERR_UNSUPPORTED, "the model has no output matrix for the head");
    if (s) return fail(PYMTP_ERR_UNSUPPORTED, "a scaled head matrix is not supported by the trimmed vocabulary");
    const char * why = "";
    c->vocab = draft_vocab_new(w, ids, n, c->n_vocab, llama_n_threads(c->ctx), &why);
    if (!c->vocab) return fail(PYMTP_ERR_UNSUPPORTED, "trimmed vocabulary: %s", why);
    ok();
    return PYMTP_OK;
    GUARD_END
}

// Decode the batch filled in c->batch (n_tokens rows, n_out of them with logits).
static int process_batch(pymtp_ctx * c, int32_t n_tokens, int32_t n_out) {
    c->last_tokens = 0;
    c->last_outputs = 0;
    const int32_t rc = llama_process(c->ctx, LLAMA_PROCESS_TYPE_DECODE, c->batch);
    if (rc != 0) {
        const char * why = rc == 1 ? "no KV cache slot for the batch (context full)"
                         : rc == 2 ? "aborted"
                         : rc == -1 ? "invalid batch"
                         : "fatal error (the sequences may hold part of the batch)";
        return fail(PYMTP_ERR_DECODE, "decode failed: %s (code %d)", why, rc);
    }
    c->last_tokens = n_tokens;
    c->last_outputs = n_out;
    c->last_batch = n_tokens;
    return PYMTP_OK;
}

int pymtp_decode_rows(pymtp_ctx * c, const int32_t * tokens, const int32_t * pos, const int32_t * seq_ids,
                      int32_t n_tokens, const uint8_t * output, const float * hidden) {
    CHECK_CTX(c);
    if (!tokens || !pos || !seq_ids) return fail(PYMTP_ERR_ARG, "tokens, pos and seq_ids must not be NULL");
    if (c->model->failed) {
        return fail(PYMTP_ERR_DECODE, "an RPC server of this model failed earlier: close the model and load it again");
    }
    if (n_tokens < 1 || (uint32_t) n_tokens > c->n_batch) {
        return fail(PYMTP_ERR_ARG, "batch of %d tokens: must be in [1, n_batch=%u]", n_tokens, c->n_batch);
    }
    if (c->is_draft != (hidden != nullptr)) {
        return fail(PYMTP_ERR_ARG, c->is_draft ? "a draft decode pairs every token with a target hidden row: hidden rows missing"
                                               : "hidden rows are inputs of draft contexts only");
    }
    if (int rc = check_tokens(c->model, tokens, n_tokens)) return rc;
    GUARD_BEGIN
    // Each sequence's rows continue where it ends, in order (n_seq_max <= 64).
    llama_pos next[64];
    for (uint32_t s = 0; s < c->n_seq_max; ++s) next[s] = -2;     // -2: not seen in this batch yet
    llama_memory_t mem = llama_get_memory(c->ctx);
    for (int32_t i = 0; i < n_tokens; ++i) {
        const int32_t s = seq_ids[i];
        if (s < 0 || (uint32_t) s >= c->n_seq_max) {
            return fail(PYMTP_ERR_ARG, "row %d: seq_id %d out of range [0, %u)", i, s, c->n_seq_max);
        }
        if (pos[i] < 0 || (uint32_t) pos[i] >= c->n_ctx) {
            return fail(PYMTP_ERR_ARG, "row %d: position %d: the positions do not fit the context (n_ctx=%u)", i, pos[i], c->n_ctx);
        }
        if (next[s] == -2 && !c->shares_memory) {
            const llama_pos pmax = llama_memory_seq_pos_max(mem, s);
            next[s] = pmax >= 0 ? pmax + 1 : -1;                   // -1: an empty sequence starts anywhere
        }
        if (next[s] >= 0 && pos[i] != next[s]) {
            return fail(PYMTP_ERR_ARG, "row %d: position %d does not continue sequence %d (next is %d)", i, pos[i], s, next[s]);
        }
        next[s] = pos[i] + 1;
    }
    if (c->is_draft) {
        // A draft decode without output rows only fills the head's KV: with no hidden rows asked
        // for, the glm4moe, qwen35(moe) and deepseek2 MTP graphs write the K/V rows alone
        // (patches 0006, 0007).
        bool any_out = !output;
        for (int32_t i = 0; i < n_tokens && !any_out; ++i) any_out = output[i] != 0;
        if (any_out != c->hidden_on) {
            llama_set_embeddings_nextn(c->ctx, any_out, /*masked*/ true);
            c->hidden_on = any_out;
        }
    }
    if (c->vocab) {
        // A trimmed vocabulary: llama.cpp projects no row; the rows asked for are captured and
        // projected here (the batch must fit one ubatch: n_ubatch = n_batch).
        c->trim_idx.clear();
        for (int32_t i = 0; i < n_tokens; ++i) {
            if (!output || output[i]) c->trim_idx.push_back(i);
        }
        const int32_t m = (int32_t) c->trim_idx.size();
        if (c->trim_rows.size() < (size_t) m * c->n_vocab) c->trim_rows.resize((size_t) m * c->n_vocab, SHIM_NEG_INF);
        if (!draft_capture_arm_rows(c->capture, n_tokens, c->trim_idx.data(), m)) return fail(PYMTP_ERR_NOSPACE, "out of memory");
        c->trim_row = nullptr;
        c->trim_n = 0;
    }
    llama_batch_ext * b = c->batch;
    llama_batch_ext_clear(b);
    int32_t n_out = 0;
    for (int32_t i = 0; i < n_tokens; ++i) {
        const int32_t idx = llama_batch_ext_add_token(b, seq_ids[i], tokens[i]);
        if (idx < 0) return fail(PYMTP_ERR_ARG, "llama.cpp refused batch row %d (code %d)", i, idx);
        llama_batch_ext_set_pos(b, idx, &pos[i]);
        const bool want = !c->vocab && (output ? output[i] != 0 : true);
        llama_batch_ext_set_output_logits(b, idx, want);
        n_out += want;
        if (c->is_draft) {
            llama_batch_ext_set_embd_token(b, idx, llama_embd{hidden + (size_t) i * c->n_embd, 1, (size_t) c->n_embd});
        }
    }
    if (int rc = process_batch(c, n_tokens, n_out)) return rc;
    if (c->vocab) {
        const int32_t m = (int32_t) c->trim_idx.size();
        if (m > 0 && !draft_capture_done(c->capture)) {
            return fail(PYMTP_ERR_UNSUPPORTED, "this model's MTP graph gave no h_nextn rows to capture: "
                        "the trimmed draft vocabulary cannot work with it");
        }
        const float * h = draft_capture_row(c->capture);
        for (int32_t r = 0; r < m; ++r) {
            if (!draft_vocab_logits_into(c->vocab, h + (size_t) r * c->n_embd, c->trim_rows.data() + (size_t) r * c->n_vocab)) {
                return fail(PYMTP_ERR_DECODE, "the trimmed head's projection failed");
            }
        }
        c->trim_row = c->trim_rows.data();
        c->trim_n = m;
        c->last_outputs = m;
    }
    ok();
    return PYMTP_OK;
    GUARD_END_MODEL(c->model)
}

int pymtp_logits(pymtp_ctx * c, float ** out, int32_t * n_rows) {
    CHECK_CTX(c);
    if (!out || !n_rows) return fail(PYMTP_ERR_ARG, "out and n_rows must not be NULL");
    *out = nullptr;
    *n_rows = 0;
    if (c->last_outputs == 0) return fail(PYMTP_ERR_ARG, "no logits: the last decode asked for none (or failed)");
    if (c->vocab) {
        *out = const_cast<float *>(c->trim_row);
        *n_rows = c->trim_n;
        ok();
        return PYMTP_OK;
    }
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
    if (c->vocab) {          // the captured rows (of the last token, or of decode_rows' output rows)
        *out = const_cast<float *>(draft_capture_row(c->capture));
        *n_rows = draft_capture_count(c->capture);
        ok();
        return PYMTP_OK;
    }
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
        float mx;
        out_ids[r] = row_argmax(x, n_cols, &mx);
        if (out_prob) out_prob[r] = (float) (1.0 / exp_sum(x, n_cols, mx, 1.0f));
    }
    ok();
    return PYMTP_OK;
}

int pymtp_draft_greedy(pymtp_ctx * c, int32_t n_seq, const int32_t * seq_ids, const int32_t * pos,
                       const int32_t * n_max, const float * p_min, int32_t stride,
                       int32_t * out_tokens, float * out_probs, int32_t * out_n) {
    CHECK_CTX(c);
    if (!c->is_draft) return fail(PYMTP_ERR_ARG, "greedy drafting runs on a draft context");
    if (!seq_ids || !pos || !n_max || !p_min || !out_tokens || !out_probs || !out_n || n_seq < 1 ||
        (uint32_t) n_seq > c->n_seq_max || stride < 1 || stride > 64) {
        return fail(PYMTP_ERR_ARG, "bad draft_greedy arguments");
    }
    for (int32_t r = 0; r < n_seq; ++r) {
        if (n_max[r] < 1 || n_max[r] > stride) return fail(PYMTP_ERR_ARG, "draft_greedy: n_max[%d] = %d outside [1, %d]", r, n_max[r], stride);
        out_n[r] = 0;
    }
    if (c->last_outputs != n_seq) {
        return fail(PYMTP_ERR_ARG, "draft_greedy: the last draft decode output %d rows, not one per sequence (%d)",
                    c->last_outputs, n_seq);
    }
    // going[j]: the sequence whose prediction is output row j of the last decode
    std::vector<int32_t> going(n_seq), next, toks, at, seqs;
    for (int32_t r = 0; r < n_seq; ++r) going[r] = r;
    c->own_row.resize((size_t) n_seq * c->n_embd);
    while (!going.empty()) {
        float * rows = nullptr;
        int32_t n_rows = 0;
        if (int rc = pymtp_logits(c, &rows, &n_rows)) return rc;
        next.clear();
        for (size_t j = 0; j < going.size(); ++j) {
            const int32_t r = going[j];
            int32_t tok = 0;
            float prob = 0.0f;
            pymtp_rows_argmax(rows + j * (size_t) c->n_vocab, 1, c->n_vocab, &tok, &prob);
            if (prob < p_min[r]) continue;
            out_tokens[(size_t) r * stride + out_n[r]] = tok;
            out_probs[(size_t) r * stride + out_n[r]] = prob;
            if (++out_n[r] < n_max[r]) next.push_back((int32_t) j);
        }
        if (next.empty()) break;
        // Copy the continuing rows' own hidden rows: the next decode rewrites the buffer. A
        // decode's hidden rows are its output rows, in order (one row per sequence here, or the
        // caller's first decode with the continuing sequences' last tokens first).
        float * h = nullptr;
        if (int rc = pymtp_hidden(c, &h, &n_rows)) return rc;
        toks.clear(); at.clear(); seqs.clear();
        std::vector<int32_t> cont;
        for (size_t i = 0; i < next.size(); ++i) {
            const int32_t j = next[i], r = going[j];
            if (j >= n_rows) return fail(PYMTP_ERR_ARG, "draft_greedy: no hidden row for output row %d", j);
            std::copy(h + (size_t) j * c->n_embd, h + (size_t) (j + 1) * c->n_embd, c->own_row.begin() + i * (size_t) c->n_embd);
            toks.push_back(out_tokens[(size_t) r * stride + out_n[r] - 1]);
            at.push_back(pos[r] + out_n[r] - 1);
            seqs.push_back(seq_ids[r]);
            cont.push_back(r);
        }
        if (int rc = pymtp_decode_rows(c, toks.data(), at.data(), seqs.data(), (int32_t) toks.size(), nullptr,
                                       c->own_row.data())) return rc;
        going = cont;
    }
    ok();
    return PYMTP_OK;
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
        // A safety guard, not a rollback strategy (Python chooses that): llama.cpp keeps recurrent
        // snapshots for the tokens of the last decode only, the state before that decode is not
        // among them, and a deeper rollback would restore garbage.
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

static int seq_pos(pymtp_ctx * c, int32_t seq_id, int32_t * out, bool last) {
    CHECK_CTX(c);
    if (!out) return fail(PYMTP_ERR_ARG, "out must not be NULL");
    if (int rc = check_seq(c, seq_id)) return rc;
    GUARD_BEGIN
    llama_memory_t mem = llama_get_memory(c->ctx);
    *out = last ? llama_memory_seq_pos_max(mem, seq_id) : llama_memory_seq_pos_min(mem, seq_id);
    ok();
    return PYMTP_OK;
    GUARD_END
}

int pymtp_seq_pos_max(pymtp_ctx * c, int32_t seq_id, int32_t * out) { return seq_pos(c, seq_id, out, true); }
int pymtp_seq_pos_min(pymtp_ctx * c, int32_t seq_id, int32_t * out) { return seq_pos(c, seq_id, out, false); }

int pymtp_checkpoint_save(pymtp_ctx * c, int32_t seq_id) {
    CHECK_CTX(c);
    if (int rc = check_seq(c, seq_id)) return rc;
    GUARD_BEGIN
    const auto flags = LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY;
    const size_t need = llama_state_seq_get_size_ext(c->ctx, seq_id, flags);
    auto & buf = c->checkpoint[seq_id];
    if (need > buf.size()) buf.resize(need);
    c->checkpoint_size[seq_id] = 0;
    const size_t n = llama_state_seq_get_data_ext(c->ctx, buf.data(), buf.size(), seq_id, flags);
    if (n == 0 && need != 0) return fail(PYMTP_ERR_DECODE, "could not save the state of sequence %d", seq_id);
    c->checkpoint_size[seq_id] = n ? n : SIZE_MAX;     // SIZE_MAX: an empty state was saved
    ok();
    return PYMTP_OK;
    GUARD_END
}

int pymtp_checkpoint_restore(pymtp_ctx * c, int32_t seq_id) {
    CHECK_CTX(c);
    if (int rc = check_seq(c, seq_id)) return rc;
    if (c->checkpoint_size[seq_id] == 0) return fail(PYMTP_ERR_ARG, "no checkpoint saved for sequence %d", seq_id);
    GUARD_BEGIN
    const size_t size = c->checkpoint_size[seq_id] == SIZE_MAX ? 0 : c->checkpoint_size[seq_id];
    const size_t n = llama_state_seq_set_data_ext(c->ctx, c->checkpoint[seq_id].data(), size, seq_id,
                                                  LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    if (n == 0 && size != 0) return fail(PYMTP_ERR_DECODE, "could not restore the state of sequence %d", seq_id);
    c->last_tokens = c->last_outputs = 0;
    c->last_batch = INT32_MAX;             // the restored state stands before every later position
    ok();
    return PYMTP_OK;
    GUARD_END
}

static int check_state_ctx(const pymtp_ctx * c, int32_t seq_id) {
    if (int rc = check_seq(c, seq_id)) return rc;
    if (c->shares_memory) return fail(PYMTP_ERR_UNSUPPORTED, "this draft reads the target's memory: save the target's state");
    return PYMTP_OK;
}

static llama_state_seq_flags state_flags(int32_t partial) {
    return partial ? LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY : 0;
}

int pymtp_state_size(pymtp_ctx * c, int32_t seq_id, int32_t partial, size_t * out_size) {
    CHECK_CTX(c);
    if (!out_size) return fail(PYMTP_ERR_ARG, "out_size must not be NULL");
    if (int rc = check_state_ctx(c, seq_id)) return rc;
    GUARD_BEGIN
    *out_size = llama_state_seq_get_size_ext(c->ctx, seq_id, state_flags(partial));
    ok();
    return PYMTP_OK;
    GUARD_END
}

int pymtp_state_get(pymtp_ctx * c, int32_t seq_id, int32_t partial, uint8_t * buf, size_t size,
                    size_t * out_written) {
    CHECK_CTX(c);
    if (!out_written || (!buf && size)) return fail(PYMTP_ERR_ARG, "buf and out_written must not be NULL");
    if (int rc = check_state_ctx(c, seq_id)) return rc;
    GUARD_BEGIN
    const auto flags = state_flags(partial);
    const size_t need = llama_state_seq_get_size_ext(c->ctx, seq_id, flags);
    if (size < need) return fail(PYMTP_ERR_ARG, "the buffer holds %zu bytes; the state needs %zu", size, need);
    const size_t n = llama_state_seq_get_data_ext(c->ctx, buf, size, seq_id, flags);
    if (n == 0 && need != 0) {
        return fail(PYMTP_ERR_DECODE, "could not save the state of sequence %d (a remote server failed?)", seq_id);
    }
    *out_written = n;
    ok();
    return PYMTP_OK;
    GUARD_END_MODEL(c->model)
}

int pymtp_state_set(pymtp_ctx * c, int32_t seq_id, int32_t partial, const uint8_t * buf, size_t size) {
    CHECK_CTX(c);
    if (!buf || size == 0) return fail(PYMTP_ERR_ARG, "no state bytes given");
    if (int rc = check_state_ctx(c, seq_id)) return rc;
    GUARD_BEGIN
    c->last_tokens = c->last_outputs = 0;   // the rows of the last decode no longer describe the memory
    // llama.cpp skips an empty saved sequence without clearing the live one: clear it here
    if (!partial) llama_memory_seq_rm(llama_get_memory(c->ctx), seq_id, -1, -1);
    const size_t n = llama_state_seq_set_data_ext(c->ctx, buf, size, seq_id, state_flags(partial));
    if (n == 0) {
        return fail(PYMTP_ERR_DECODE, "llama.cpp rejected the saved state of sequence %d (another model, "
                    "context kind or llama.cpp version, or a remote server failed); the sequence is now empty", seq_id);
    }
    c->last_batch = INT32_MAX;             // the restored state stands before every later position
    ok();
    return PYMTP_OK;
    GUARD_END_MODEL(c->model)
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
    const std::string why = pymtp_shim::gguf_prevalidate(src, &mtp_complete);
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
