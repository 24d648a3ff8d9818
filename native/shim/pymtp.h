/*
 * pymtp.h: the flat C API that pymtp's Python binding calls.
 *
 * Mechanisms only, no policy: load a model, make a target context and an MTP
 * draft context bound to it, decode batches, read logits and hidden ("nextn")
 * rows in place, cut and copy sequences, checkpoint recurrent state.
 * The speculative loop, sampling, heuristics and the choice of rollback live in
 * Python. Where a call takes a threshold (pymtp_draft_greedy's p_min), Python
 * chooses its value and C only applies it; where C refuses a call (pymtp_seq_rm
 * on recurrent state), it is a safety guard against what llama.cpp cannot do,
 * not a choice made for the caller.
 *
 * Conventions
 * - Every fallible call returns an int status: PYMTP_OK (0) or a negative
 *   PYMTP_ERR_* code; pymtp_last_error() then says what went wrong (per thread).
 * - Inputs are checked before they reach llama.cpp (token ids, positions,
 *   batch sizes, handles): bad input gives an error, never an abort.
 * - Pointers returned by pymtp_logits / pymtp_hidden point into llama.cpp's
 *   output buffers: valid only until the next decode on that context.
 *
 * The part between the cffi markers is plain C that cffi parses as is.
 */
#ifndef PYMTP_H
#define PYMTP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cffi:begin */

#define PYMTP_OK              0
#define PYMTP_ERR_ARG        -1  /* a bad argument: range, size, null pointer */
#define PYMTP_ERR_HANDLE     -2  /* a freed or unknown model / context handle */
#define PYMTP_ERR_LOAD       -3  /* the model file could not be loaded */
#define PYMTP_ERR_DECODE     -4  /* llama.cpp refused or failed a decode */
#define PYMTP_ERR_UNSUPPORTED -5 /* the model or context cannot do this */
#define PYMTP_ERR_NOSPACE    -6  /* an output buffer is too small */

#define PYMTP_LOG_DEBUG 1
#define PYMTP_LOG_INFO  2
#define PYMTP_LOG_WARN  3
#define PYMTP_LOG_ERROR 4

typedef struct pymtp_model pymtp_model;
typedef struct pymtp_ctx   pymtp_ctx;

/* The last error message of the calling thread ("" when none). */
const char * pymtp_last_error(void);

/* Build facts: llama.cpp commit and compiled backends ("CPU CUDA ..."). */
const char * pymtp_build_info(void);

/* llama.cpp's system info: each backend and the CPU features this build uses
 * ("CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | ..."); rounding depends on them.
 * The string belongs to the calling thread, valid until its next call. */
const char * pymtp_system_info(void);

/* llama.cpp and ggml log lines at or above min_level go to fn; fn == NULL
 * drops them all. Lines arrive whole (llama.cpp's continuation pieces joined). */
typedef void (*pymtp_log_fn)(int level, const char * text);
void pymtp_log_set(pymtp_log_fn fn, int min_level);

/* ---- model ---------------------------------------------------------------- */

typedef struct {
    char     architecture[64];
    char     description[128];
    int32_t  n_vocab;
    int32_t  n_embd;            /* width of the hidden rows handed to the MTP head */
    int32_t  n_layer;           /* trunk blocks (MTP blocks not counted) */
    int32_t  n_mtp_layers;      /* MTP / NextN blocks in the file */
    int32_t  mtp_loaded;        /* 1 when the MTP blocks were loaded */
    int32_t  n_ctx_train;
    int32_t  is_recurrent;      /* pure recurrent state (Mamba, RWKV...) */
    int32_t  is_hybrid;         /* attention plus recurrent blocks (Qwen3.5...) */
    int32_t  rs_rollback;       /* llama.cpp can roll its recurrent state back (n_rs_seq) */
    int32_t  token_bos;         /* -1 when absent */
    int32_t  token_eos;
    int32_t  token_eot;
    int32_t  add_bos;
    uint64_t n_params;
    uint64_t size_bytes;
    int32_t  n_swa;             /* sliding-window attention span (0: none) */
} pymtp_model_info;

int  pymtp_model_load(const char * path, int load_mtp, int n_gpu_layers, pymtp_model ** out);

/* Loading over several hosts: llama.cpp's RPC backend (an rpc-server on each host). */
typedef struct {
    int32_t       load_mtp;
    int32_t       n_gpu_layers;     /* layers on the devices (remote, then local GPUs); -1: all */
    const char  * rpc_servers;      /* "host:port,host:port" (NULL or "": none) */
    const float * tensor_split;     /* share of the layers per device, in that order (NULL: by free memory) */
    int32_t       n_tensor_split;
    int32_t       mtp_local;        /* keep the MTP blocks and the output head in local memory */
} pymtp_load_params;

pymtp_load_params pymtp_load_default_params(void);
int  pymtp_model_load_ext(const char * path, const pymtp_load_params * params, pymtp_model ** out);
/* 1 when a remote backend of the model failed (the model must be closed and loaded again). */
int  pymtp_model_failed(const pymtp_model * model);
int  pymtp_model_free(pymtp_model * model);   /* refused while contexts are open */
int  pymtp_model_get_info(const pymtp_model * model, pymtp_model_info * out);

/* GGUF metadata value as text; returns its length, or an error. */
int  pymtp_model_meta(const pymtp_model * model, const char * key, char * buf, int32_t buf_size);

/* 1 if the token ends generation (EOS, EOT, ...), 0 if not. */
int  pymtp_token_is_eog(const pymtp_model * model, int32_t token);

/* Fills out[0..n_max) and returns the number of tokens; when n_max is too
 * small returns PYMTP_ERR_NOSPACE and stores the number needed in *n_needed. */
int  pymtp_tokenize(const pymtp_model * model, const char * text, int32_t text_len,
                    int add_special, int parse_special,
                    int32_t * out, int32_t n_max, int32_t * n_needed);

/* Bytes of the text of tokens (not NUL-terminated); NOSPACE and *n_needed as above. */
int  pymtp_detokenize(const pymtp_model * model, const int32_t * tokens, int32_t n_tokens,
                      int render_special, char * buf, int32_t buf_size, int32_t * n_needed);

/* Bytes of one token's piece (may be part of a UTF-8 character). */
int  pymtp_token_piece(const pymtp_model * model, int32_t token, int render_special,
                       char * buf, int32_t buf_size);

/* The GGUF's chat template (name NULL for the default); PYMTP_ERR_UNSUPPORTED if none. */
int  pymtp_chat_template(const pymtp_model * model, const char * name, const char ** out);

/* Applies a chat template (llama.cpp's built-in template matcher) to n messages. */
int  pymtp_chat_apply(const char * tmpl, const char * const * roles, const char * const * contents,
                      int32_t n_messages, int add_assistant, char * buf, int32_t buf_size,
                      int32_t * n_needed);

/* ---- contexts --------------------------------------------------------------- */

typedef struct {
    uint32_t n_ctx;       /* 0 = the model's training context */
    uint32_t n_batch;     /* most tokens one decode may carry */
    uint32_t n_ubatch;    /* 0 = n_batch */
    uint32_t n_seq_max;   /* sequences (seq_id 0 .. n_seq_max-1) */
    uint32_t n_rs_seq;    /* recurrent snapshots for rollback (hybrid models), 0 = none */
    int32_t  n_threads;   /* <= 0: one per hardware thread */
    int32_t  n_threads_batch;
} pymtp_ctx_params;

typedef struct {
    uint32_t n_ctx;
    uint32_t n_batch;
    uint32_t n_rs_seq;    /* what llama.cpp granted (0 on archs without rollback) */
    int32_t  n_vocab;
    int32_t  n_embd;
    int32_t  is_draft;
    int32_t  n_threads;
} pymtp_ctx_info;

pymtp_ctx_params pymtp_ctx_default_params(void);

/* A target context: runs the trunk; every decoded row also yields its hidden row. */
int  pymtp_ctx_create(pymtp_model * model, const pymtp_ctx_params * params, pymtp_ctx ** out);

/* An MTP draft context bound to target: runs only the MTP head graph, with its
 * own KV cache (or the target's, for shared-KV assistants). */
int  pymtp_draft_create(pymtp_ctx * target, const pymtp_ctx_params * params, pymtp_ctx ** out);

/* Frees a context (a target's draft contexts must be freed first). */
int  pymtp_ctx_free(pymtp_ctx * ctx);
int  pymtp_ctx_get_info(const pymtp_ctx * ctx, pymtp_ctx_info * out);
int  pymtp_ctx_set_threads(pymtp_ctx * ctx, int32_t n_threads, int32_t n_threads_batch);

/* Which MTP block a draft context runs (0 .. n_mtp_layers-1), for chained heads. */
int  pymtp_draft_set_head(pymtp_ctx * draft, int32_t head);

/* A trimmed draft vocabulary (FastMTP): from now on the head scores only the n tokens ids
 * (ascending); n = 0 switches it off. The draft context's logits stay n_vocab wide, -inf
 * outside ids, and the batch of a decode that asks for them must fit one ubatch; its hidden
 * rows are those of the rows asked for. Single-head models whose MTP graph names its pre-projection row "h_nextn"
 * (glm4moe, deepseek2...); PYMTP_ERR_UNSUPPORTED otherwise (at the call or the next decode). */
int  pymtp_draft_set_vocab(pymtp_ctx * draft, const int32_t * ids, int32_t n);

/*
 * The one decode: rows of one or several sequences in one batch. Row i is token tokens[i] of
 * sequence seq_ids[i] at position pos[i]. Each sequence's rows must continue where it ends, in
 * order (pos = pos_max + 1, ...; an empty sequence starts anywhere; the rows of different
 * sequences may interleave). A context with several sequences (n_seq_max > 1) shares its
 * n_ctx cells between them.
 *
 * output: per row, 1 to get its logits (NULL = every row). On a target context the hidden
 *   row of every token is kept whatever output says.
 * hidden (draft contexts only, required there): the target hidden row each token is paired
 *   with, n_tokens x n_embd floats. MTP pairs token x(p) with hidden row h(p-1) (typically
 *   the target's own hidden rows, one position earlier).
 * Logits and hidden rows come back in batch order. With a trimmed draft vocabulary any rows
 * may ask for logits (the batch must fit one ubatch), and the hidden rows are those rows'.
 */
int  pymtp_decode_rows(pymtp_ctx * ctx, const int32_t * tokens, const int32_t * pos, const int32_t * seq_ids,
                       int32_t n_tokens, const uint8_t * output, const float * hidden);

/* Logits of the rows asked for in the last decode, in batch order:
 * *n_rows x n_vocab floats. Valid until the next decode on ctx. */
int  pymtp_logits(pymtp_ctx * ctx, float ** out, int32_t * n_rows);

/* Hidden rows of the last decode: a target gives one per token, a draft one
 * per output row; *n_rows x n_embd floats. Valid until the next decode on ctx. */
int  pymtp_hidden(pymtp_ctx * ctx, float ** out, int32_t * n_rows);

/* Index of the largest value of each of n_rows rows of width n_cols, and the
 * softmax probability of that value (out_prob may be NULL). */
int  pymtp_rows_argmax(const float * rows, int32_t n_rows, int32_t n_cols,
                       int32_t * out_ids, float * out_prob);

/* Greedy draft recursion of n_seq sequences, one call for their whole drafts. The draft
 * context's last decode must have output one row per sequence, row r the head's prediction
 * for sequence seq_ids[r], and its first hidden rows those of the sequences that draft more
 * than one token (decode their last tokens first). Repeats, for each sequence r still going:
 * take the argmax of its row, stop r if its softmax probability is below p_min[r], else keep
 * it and, unless n_max[r] (<= stride <= 64) is reached, decode it at pos[r], pos[r]+1, ...
 * paired with the head's own hidden row; the sequences still going share one decode per
 * draft position. p_min and n_max are the caller's choice (Python's draft policy; p_min = 0
 * never stops early): this call only applies them. Writes sequence r's tokens and their
 * probabilities at out_tokens / out_probs + r * stride and their count at out_n[r]. The caller
 * removes positions >= pos[r] from the draft KV afterwards (they hold the head's rows). */
int  pymtp_draft_greedy(pymtp_ctx * draft, int32_t n_seq, const int32_t * seq_ids, const int32_t * pos,
                        const int32_t * n_max, const float * p_min, int32_t stride,
                        int32_t * out_tokens, float * out_probs, int32_t * out_n);

/* ---- sampling and verification (sampler.cpp) -----------------------------------
 *
 * The arithmetic of one vocabulary row, for Python's sampling policy. A row becomes a
 * distribution by: mask (a packed bitmask, bit j of word j/32 = token j allowed; NULL = all),
 * logit bias, penalties over a window of recent tokens (repetition: divide a positive logit,
 * multiply a negative one; then subtract frequency x count + presence), temperature
 * (0 = greedy: the argmax), top-k, softmax, top-p (the smallest set of most likely tokens
 * with that much mass; ties: the lower id), min-p (drop tokens below min_p x the top one),
 * renormalize. A sampler keeps distributions in numbered slots (the drafter's q for each
 * draft position); a slot is sparse (ids ascending) when something truncated it, else dense.
 * Draws follow one of two rules. Independent (coupled = 0): a uniform u in [0, 1) from the
 * caller (Python's seeded RNG) picks the first token, in id order, whose cumulative
 * probability exceeds u. Coupled (coupled = 1): the token drawn at text position n is the
 * winner of an exponential race, argmin_j E_j / p_j with E_j = -log(U(seed, n, j)) and U a
 * counter-based hash: every draw at position n, from any distribution, reads the same
 * numbers, so a drafter's draw and the target's agree as often as their distributions allow,
 * and the target's token never depends on what was drafted. Only create and configure
 * allocate. */

typedef struct {
    float   temperature;          /* 0: greedy */
    int32_t top_k;                /* 0: no limit */
    float   top_p;                /* 1: off */
    float   min_p;                /* 0: off */
    float   repetition_penalty;   /* 1: off */
    float   presence_penalty;     /* 0: off */
    float   frequency_penalty;    /* 0: off */
    int32_t penalty_window;       /* the latest tokens the penalties count (0: no penalties) */
    int32_t coupled;              /* 1: draws are races keyed by (seed, position); 0: by u */
    uint64_t seed;                /* the races' key (coupled only) */
} pymtp_sampling_params;

typedef struct pymtp_sampler pymtp_sampler;

int  pymtp_sampler_create(int32_t n_vocab, int32_t n_slots, pymtp_sampler ** out);
int  pymtp_sampler_free(pymtp_sampler * s);
/* Settings for the calls that follow; bias: n_bias (token, value) pairs added to the logits. */
int  pymtp_sampler_configure(pymtp_sampler * s, const pymtp_sampling_params * params,
                             const int32_t * bias_ids, const float * bias_values, int32_t n_bias);

/* slot = the distribution of one logits row. history: the tokens before the row's (only the
 * last penalty_window are read). Greedy: *out_token = the argmax. Else, u >= 0: a token drawn
 * (coupled: the race at text position `position`, u unread; else with u); u < 0: none
 * (*out_token = -1). out_conf (may be NULL): the largest probability
 * (greedy: the argmax's softmax probability at temperature 1). A row where no token the mask
 * allows has a finite logit (a trimmed draft vocabulary under a grammar) is no error:
 * *out_token = -1, *out_conf = 0, and the slot holds nothing. */
int  pymtp_sampler_row(pymtp_sampler * s, int32_t slot, const float * row,
                       const int32_t * history, int32_t n_history, const uint32_t * mask,
                       double u, int64_t position, int32_t * out_token, float * out_conf);

/* slot = a point mass on token (prompt lookup's q), or a dense distribution given by the caller. */
int  pymtp_sampler_set_point(pymtp_sampler * s, int32_t slot, int32_t token);
int  pymtp_sampler_set_dense(pymtp_sampler * s, int32_t slot, const float * q);

/* Read a slot: *n entries, *ids NULL when dense (entry i is token i). Valid until it changes. */
int  pymtp_sampler_slot(const pymtp_sampler * s, int32_t slot, int32_t * n,
                        const int32_t ** ids, const float ** probs);

/*
 * Speculative verification of one verify batch, in one call. rows: k + 1 logits rows, row i
 * the target's after history + draft[:i]; masks: NULL or k + 1 bitmasks. Greedy: accept the
 * longest prefix where the row's argmax equals the draft, then emit the target's own token.
 * Sampling: draft token i, drawn from q = slot i, is accepted when u[i] * q(d) < p(d)
 * (probability min(1, p/q)); on the first rejection the emitted token is drawn with u[k] from
 * normalize(max(0, p - q)) (from p when that is empty); after a full accept, from row k's p
 * with u[k]. u: k + 1 uniforms (unused when greedy or coupled). Coupled sampling: row i's
 * token is the race at text position position + i; draft token i is accepted when it is that
 * token, so the emitted tokens are the ones plain decoding draws, whatever was drafted. Writes the accepted count and the
 * emitted token; out_probs (NULL or k + 1 floats): the target's probability of each token
 * it kept and of the emitted one (greedy: softmax at temperature 1).
 */
/*
 * The n (1..20) most probable tokens of one logits row after history, under the sampling
 * settings (greedy: the softmax at temperature 1 of the row with mask, bias and penalties, as
 * the verify's out_probs), most probable first, with their natural-log probabilities. Tokens
 * of probability 0 are left out (*out_n may be less than n; 0 when nothing is allowed).
 */
int  pymtp_sampler_top(pymtp_sampler * s, const float * row, const int32_t * history, int32_t n_history,
                       const uint32_t * mask, int32_t n, int32_t * out_ids, float * out_logprobs, int32_t * out_n);
int  pymtp_sampler_verify(pymtp_sampler * s, const float * rows, const int32_t * draft, int32_t k,
                          const int32_t * history, int32_t n_history, const uint32_t * masks,
                          const double * u, int64_t position, int32_t * out_n_acc, int32_t * out_token, float * out_probs);

/* ---- memory ------------------------------------------------------------------ */

/* Removes positions [p0, p1) of seq_id (p1 < 0: to the end). On hybrid models a
 * partial removal needs n_rs_seq snapshots or a checkpoint: without them it
 * returns PYMTP_ERR_UNSUPPORTED and the memory is unchanged.
 * On a recurrent or hybrid target, a removal that reaches back as far as the start
 * of the last decode is refused the same way: llama.cpp's snapshots cover only
 * the tokens of that decode, and restoring an older state would yield garbage.
 * This depth check is a safety guard, not a rollback strategy: the Python side
 * chooses the rollback (a KV trim, n_rs_seq snapshots, or a checkpoint restore
 * plus re-decode) and calls this only where llama.cpp can do it. */
int  pymtp_seq_rm(pymtp_ctx * ctx, int32_t seq_id, int32_t p0, int32_t p1);
int  pymtp_seq_cp(pymtp_ctx * ctx, int32_t src, int32_t dst, int32_t p0, int32_t p1);
/* Largest position held for seq_id, -1 when empty. */
int  pymtp_seq_pos_max(pymtp_ctx * ctx, int32_t seq_id, int32_t * out);
/* Smallest position held for seq_id (sliding-window layers let older ones go), -1 when empty. */
int  pymtp_seq_pos_min(pymtp_ctx * ctx, int32_t seq_id, int32_t * out);

/* Save / restore the recurrent (non-rollbackable) state of seq_id into a buffer
 * the context owns (allocated once, reused). Restore then seq_rm the positions
 * past the checkpoint to roll a hybrid model back without n_rs_seq. */
int  pymtp_checkpoint_save(pymtp_ctx * ctx, int32_t seq_id);
int  pymtp_checkpoint_restore(pymtp_ctx * ctx, int32_t seq_id);

/* The memory of seq_id as bytes the caller owns, to keep several texts cached or to write
 * one to disk. partial = 1: only the recurrent state of a hybrid model (its attention KV
 * stays in place and is cut with seq_rm). pymtp_state_size gives the bytes pymtp_state_get
 * writes; pymtp_state_set replaces the sequence with saved bytes of the same model and
 * context kind (PYMTP_ERR_DECODE, sequence emptied, when llama.cpp rejects them). Not for
 * drafts that share the target's memory. */
int  pymtp_state_size(pymtp_ctx * ctx, int32_t seq_id, int32_t partial, size_t * out_size);
int  pymtp_state_get(pymtp_ctx * ctx, int32_t seq_id, int32_t partial, uint8_t * buf, size_t size,
                     size_t * out_written);
int  pymtp_state_set(pymtp_ctx * ctx, int32_t seq_id, int32_t partial, const uint8_t * buf, size_t size);

/* ---- files ------------------------------------------------------------------- */

/* Writes src re-quantized to dst with llama.cpp's quantizer. ftype is a llama_ftype
 * (LLAMA_FTYPE_MOSTLY_Q4_0 = 2, ...). Tensors whose name matches one of the n_overrides
 * regex patterns get types[i] (a ggml_type) instead, e.g. to keep the MTP block at a
 * higher precision. allow_requantize: accept already-quantized source tensors. */
int  pymtp_quantize(const char * src, const char * dst, int32_t ftype,
                    const char * const * patterns, const int32_t * types, int32_t n_overrides,
                    int32_t allow_requantize, int32_t n_threads);

/* cffi:end */

#ifdef __cplusplus
}
#endif

#endif /* PYMTP_H */
