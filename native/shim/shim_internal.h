// shim_internal.h: what the shim's source files share (not part of the C API).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// Sets the calling thread's pymtp_last_error() text (NULL clears it).
void shim_set_error(const char * msg);

// draft_vocab.cpp: the trimmed draft vocabulary and the capture of the head's hidden row.
struct ggml_tensor;
struct draft_capture;
struct draft_vocab;
draft_capture * draft_capture_new(int32_t n_embd);
void draft_capture_free(draft_capture * c);
void draft_capture_arm(draft_capture * c, bool on);
bool draft_capture_done(const draft_capture * c);
const float * draft_capture_row(const draft_capture * c);      // the captured rows, one after another
// Capture the hidden rows at these batch indices of the next decodes (of n_tokens rows, which
// must sit in one ubatch); false when out of memory.
bool draft_capture_arm_rows(draft_capture * c, int32_t n_tokens, const int32_t * idx, int32_t m);
int32_t draft_capture_count(const draft_capture * c);
bool draft_capture_cb(ggml_tensor * t, bool ask, void * user_data);   // a ggml eval callback
draft_vocab * draft_vocab_new(const ggml_tensor * head, const int32_t * ids, int32_t n, int32_t n_vocab,
                              int32_t n_threads, const char ** why);
void draft_vocab_free(draft_vocab * v);
int32_t draft_vocab_size(const draft_vocab * v);
bool draft_vocab_logits_into(draft_vocab * v, const float * hidden, float * out);

// placement.cpp: the devices of remote (RPC) servers.
#include <string>
#include <vector>
struct ggml_backend_device;
// Appends the devices of the RPC servers ("host:port,host:port"), then local accelerators;
// returns "" or why not.
std::string placement_rpc_devices(const char * servers, std::vector<ggml_backend_device *> & out);

constexpr float SHIM_NEG_INF = -std::numeric_limits<float>::infinity();

// e^x for x <= 0, about 2 ulp (Cephes' expf polynomial), 0 below -87. Branch-free so that
// the loops over the vocabulary vectorize.
inline float exp_nonpos(float x) {
    const float xc = x < -87.0f ? -87.0f : x;
    const float t = xc * 1.44269504088896341f;
    const float n = (t + 12582912.0f) - 12582912.0f;          // round to nearest
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const int32_t bits = ((int32_t) n + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof(scale));
    return x < -87.0f ? 0.0f : p * scale;
}

// Index of the largest value (the first on ties), and the value.
inline int32_t row_argmax(const float * x, int32_t n, float * out_max) {
    int32_t i = 0;
    float best = SHIM_NEG_INF;
    int32_t at = 0;
#if defined(__SSE2__)
    // four lanes of (max, index); NaN never wins a comparison, as in the scalar loop
    __m128 vmax = _mm_set1_ps(SHIM_NEG_INF);
    __m128i vidx = _mm_setzero_si128();
    __m128i cur = _mm_setr_epi32(0, 1, 2, 3);
    const __m128i four = _mm_set1_epi32(4);
    for (; i + 4 <= n; i += 4) {
        const __m128 v = _mm_loadu_ps(x + i);
        const __m128 gt = _mm_cmpgt_ps(v, vmax);
        vmax = _mm_or_ps(_mm_and_ps(gt, v), _mm_andnot_ps(gt, vmax));
        const __m128i g = _mm_castps_si128(gt);
        vidx = _mm_or_si128(_mm_and_si128(g, cur), _mm_andnot_si128(g, vidx));
        cur = _mm_add_epi32(cur, four);
    }
    float lm[4];
    int32_t li[4];
    _mm_storeu_ps(lm, vmax);
    _mm_storeu_si128((__m128i *) li, vidx);
    for (int j = 0; j < 4; ++j) {
        if (lm[j] > best || (lm[j] == best && li[j] < at)) {
            best = lm[j];
            at = li[j];
        }
    }
#endif
    for (; i < n; ++i) {
        if (x[i] > best) {
            best = x[i];
            at = i;
        }
    }
    if (out_max) *out_max = best;
    return at;
}

// sum of x[0..n) in double, four lanes.
inline double sum_f64(const float * x, int32_t n) {
    double s[4] = {0, 0, 0, 0};
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        for (int j = 0; j < 4; ++j) s[j] += x[i + j];
    }
    double total = s[0] + s[1] + s[2] + s[3];
    for (; i < n; ++i) total += x[i];
    return total;
}

// out[i] = e^((x[i] - m) * scale); returns their sum (in double).
inline double exp_shifted(const float * x, int32_t n, float m, float scale, float * out) {
    for (int32_t i = 0; i < n; ++i) out[i] = exp_nonpos((x[i] - m) * scale);
    return sum_f64(out, n);
}

// sum_i e^((x[i] - m) * scale), in blocks through a stack buffer (nothing kept).
inline double exp_sum(const float * x, int32_t n, float m, float scale) {
    float buf[1024];
    double total = 0.0;
    for (int32_t i = 0; i < n; i += 1024) {
        const int32_t len = n - i < 1024 ? n - i : 1024;
        total += exp_shifted(x + i, len, m, scale, buf);
    }
    return total;
}
