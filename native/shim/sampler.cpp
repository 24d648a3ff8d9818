// sampler.cpp: the sampling transform and speculative verification, over whole vocabulary rows.
//
// Python chooses the settings and drives the loop (pymtp.sampling); this file does the per-row
// arithmetic, which at 150k-250k vocabularies cost milliseconds per row in numpy. One row goes
// through: mask, logit bias, penalties (repetition, presence, frequency), temperature, top-k
// (a heap or nth_element: partial selection), softmax, top-p (an exponent histogram finds the
// few candidates that can make the nucleus, and only they are sorted), min-p. The result is a
// distribution: sparse (ids ascending, probabilities) when something truncated it, else dense.
// Every buffer is allocated by pymtp_sampler_create / _configure; the per-row calls allocate
// nothing.

#pragma GCC visibility push(default)
#include "pymtp.h"
#pragma GCC visibility pop
#include "shim_internal.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <utility>
#include <vector>

namespace {

constexpr float NEG_INF = SHIM_NEG_INF;

int fail(int code, const char * fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    shim_set_error(buf);
    return code;
}

int ok() {
    shim_set_error(nullptr);
    return PYMTP_OK;
}

struct dist {
    int32_t n = 0;
    bool dense = false;            // ids are 0..n-1 (nothing truncated); ids[] unused
    std::vector<int32_t> ids;      // ascending
    std::vector<float> probs;

    int32_t id(int32_t i) const { return dense ? i : ids[i]; }

    float prob_of(int32_t tok) const {
        if (dense) return probs[tok];
        const int32_t * b = ids.data();
        const int32_t * e = b + n;
        const int32_t * it = std::lower_bound(b, e, tok);
        return (it != e && *it == tok) ? probs[it - b] : 0.0f;
    }

    void point(int32_t tok) {
        dense = false;
        n = 1;
        ids[0] = tok;
        probs[0] = 1.0f;
    }
};

// Inverse CDF in token-id order: the first entry whose cumulative weight exceeds u x total
// (numpy's searchsorted(cumsum(w), u * sum(w), side="right"), as pymtp sampled before).
// Block sums first (they vectorize), then one block scanned entry by entry.
int32_t draw_index(const float * w, int32_t n, double u) {
    constexpr int32_t B = 256;
    double total = 0.0;
    for (int32_t b = 0; b < n; b += B) total += sum_f64(w + b, std::min(B, n - b));
    const double target = u * total;
    double c = 0.0;
    for (int32_t b = 0; b < n; b += B) {
        const int32_t len = std::min(B, n - b);
        const double s = sum_f64(w + b, len);
        if (c + s > target) {
            for (int32_t i = b; i < b + len; ++i) {
                c += w[i];
                if (c > target) return i;
            }
            break;       // rounding: the block's entries summed one by one fell short
        }
        c += s;
    }
    for (int32_t i = n - 1; i > 0; --i) {
        if (w[i] > 0.0f) return i;     // the last entry of positive weight
    }
    return 0;
}

// splitmix64's finalizer: a bijection of 64-bit words whose outputs pass as independent.
inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

constexpr uint64_t GOLDEN = 0x9E3779B97F4A7C15ULL;

// The key of text position `position` under seed: every token's number at that position
// derives from it.
inline uint64_t race_key(uint64_t seed, int64_t position) {
    return mix64(mix64(seed + GOLDEN) ^ ((uint64_t) position * GOLDEN));
}

// U(key, token) in (0, 1): 53 random bits, centred so that 0 never comes out.
inline double race_uniform(uint64_t key, int32_t token) {
    return ((double) (mix64(key + (uint64_t) (token + 1) * GOLDEN) >> 11) + 0.5) * 0x1.0p-53;
}

// The exponential race over w (weights, any scale): argmin_i -log(U_i) / w_i, ties to the
// lower token. Token i can only beat the best time t so far if U_i > exp(-t w_i); as
// exp(-x) >= 1 - x, a U_i below 1 - t w_i (less a margin for rounding) cannot, and most
// entries are dismissed with a hash and a multiply: a handful take the logarithm.
template <typename IdOf>
int32_t race_index(const float * w, int32_t n, uint64_t key, IdOf id_of) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; ++i) best = w[i] > w[best] ? i : best;
    if (!(w[best] > 0.0f)) return 0;
    double t = -std::log(race_uniform(key, id_of(best))) / (double) w[best];
    for (int32_t i = 0; i < n; ++i) {
        const double wi = w[i];
        if (!(wi > 0.0) || i == best) continue;
        const int32_t tok = id_of(i);
        const double u = race_uniform(key, tok);
        if (u <= 1.0 - t * wi - 1e-12) continue;
        const double e = -std::log(u) / wi;
        if (e < t || (e == t && tok < id_of(best))) {
            t = e;
            best = i;
        }
    }
    return best;
}

// A token drawn from d: coupled, the race at `position`; otherwise by u in id order.
int32_t draw_token(const pymtp_sampling_params & c, const dist & d, const float * w, double u, int64_t position) {
    if (c.coupled) {
        const uint64_t key = race_key(c.seed, position);
        return d.id(race_index(w, d.n, key, [&d](int32_t i) { return d.id(i); }));
    }
    return d.id(draw_index(w, d.n, std::min(u, 1.0)));
}

}  // namespace

struct pymtp_sampler {
    int32_t n_vocab = 0;
    pymtp_sampling_params params{};
    bool penalizes = false;
    std::vector<int32_t> bias_ids;
    std::vector<float> bias_vals;
    std::vector<dist> slots;
    dist p;                                       // the target's distribution at a verify row
    std::vector<float> x;                         // the row after mask, bias and penalties
    std::vector<float> scratch;                   // residual weights
    std::vector<int32_t> counts;                  // penalty counts, all zero between calls
    std::vector<int32_t> touched;                 // the ids counts holds
    std::vector<float> qdense;                    // a sparse q scattered; all zero between calls
    std::vector<std::pair<float, int32_t>> cand;  // candidates being ranked
    std::vector<int32_t> window;                  // the penalty window of one row
};

namespace {

bool greedy(const pymtp_sampler * s) { return s->params.temperature <= 0.0f; }

// The penalty window of a row: the last `penalty_window` tokens of history + extra.
const int32_t * compose_window(pymtp_sampler * s, const int32_t * hist, int32_t n_hist,
                               const int32_t * extra, int32_t n_extra, int32_t * n_out) {
    const int32_t w = s->params.penalty_window;
    const int32_t from_extra = std::min(n_extra, w);
    const int32_t from_hist = std::min(n_hist, w - from_extra);
    int32_t * out = s->window.data();
    std::memcpy(out, hist + (n_hist - from_hist), sizeof(int32_t) * from_hist);
    std::memcpy(out + from_hist, extra + (n_extra - from_extra), sizeof(int32_t) * from_extra);
    *n_out = from_hist + from_extra;
    return out;
}

// The row with mask, bias and penalties applied: the row itself when none applies.
const float * adjusted(pymtp_sampler * s, const float * row, const int32_t * win, int32_t n_win,
                       const uint32_t * mask) {
    const bool pen = s->penalizes && n_win > 0;
    if (!pen && s->bias_ids.empty() && !mask) return row;
    const int32_t V = s->n_vocab;
    float * x = s->x.data();
    std::memcpy(x, row, sizeof(float) * V);
    if (mask) {
        for (int32_t i = 0; i < V; ++i) {
            x[i] = ((mask[i >> 5] >> (i & 31)) & 1u) ? x[i] : NEG_INF;
        }
    }
    for (size_t j = 0; j < s->bias_ids.size(); ++j) x[s->bias_ids[j]] += s->bias_vals[j];
    if (pen) {
        const pymtp_sampling_params & c = s->params;
        for (int32_t j = 0; j < n_win; ++j) {
            if (s->counts[win[j]]++ == 0) s->touched.push_back(win[j]);
        }
        for (int32_t t : s->touched) {
            float v = x[t];
            if (c.repetition_penalty != 1.0f) v = v > 0 ? v / c.repetition_penalty : v * c.repetition_penalty;
            v -= c.frequency_penalty * (float) s->counts[t] + c.presence_penalty;
            x[t] = v;
            s->counts[t] = 0;
        }
        s->touched.clear();
    }
    return x;
}

using cand_t = std::pair<float, int32_t>;

// Ranked by weight, ties: the lower id first.
bool ranks_before(const cand_t & a, const cand_t & b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// The k largest entries of x (ties: the lower id), as (value, id) in s->cand.
void top_k(pymtp_sampler * s, const float * x, int32_t k) {
    const int32_t V = s->n_vocab;
    auto & c = s->cand;
    c.clear();
    if (k <= 256) {
        // a heap whose front is the worst of the best k so far; most entries fail the first compare
        for (int32_t i = 0; i < k; ++i) c.emplace_back(x[i], i);
        std::make_heap(c.begin(), c.end(), ranks_before);
        for (int32_t i = k; i < V; ++i) {
            if (x[i] > c.front().first) {
                std::pop_heap(c.begin(), c.end(), ranks_before);
                c.back() = {x[i], i};
                std::push_heap(c.begin(), c.end(), ranks_before);
            }
        }
    } else {
        for (int32_t i = 0; i < V; ++i) c.emplace_back(x[i], i);
        std::nth_element(c.begin(), c.begin() + (k - 1), c.end(), ranks_before);
        c.resize(k);
    }
}

// Keep the smallest prefix of d's entries, ranked by weight, whose weight reaches mass (d's
// probabilities are unnormalized weights). Dense rows: a histogram of the weights' binary
// exponents shows which bucket the nucleus ends in; every entry above it is kept, and only
// that bucket's entries are ranked.
void keep_nucleus(pymtp_sampler * s, dist & d, double mass) {
    auto & c = s->cand;
    c.clear();
    if (!d.dense) {
        for (int32_t i = 0; i < d.n; ++i) c.emplace_back(d.probs[i], d.ids[i]);
        std::sort(c.begin(), c.end(), ranks_before);
        size_t keep = c.size();
        double acc = 0.0;
        for (size_t i = 0; i < c.size(); ++i) {
            acc += c[i].first;
            if (acc >= mass) {
                keep = i + 1;
                break;
            }
        }
        c.resize(keep);
        std::sort(c.begin(), c.end(), [](const cand_t & a, const cand_t & b) { return a.second < b.second; });
        d.n = (int32_t) keep;
        for (size_t i = 0; i < keep; ++i) {
            d.ids[i] = c[i].second;
            d.probs[i] = c[i].first;
        }
        return;
    }
    auto bucket = [](float w) {
        uint32_t bits;
        std::memcpy(&bits, &w, sizeof(bits));
        return (int) ((bits >> 23) & 0xff);
    };
    double bucket_mass[256] = {0};
    for (int32_t i = 0; i < d.n; ++i) bucket_mass[bucket(d.probs[i])] += d.probs[i];
    int b = 255;
    double above = 0.0;                   // mass of the buckets above b
    for (; b > 0; --b) {
        if (above + bucket_mass[b] >= mass) break;
        above += bucket_mass[b];
    }
    for (int32_t i = 0; i < d.n; ++i) {
        if (bucket(d.probs[i]) == b) c.emplace_back(d.probs[i], i);
    }
    std::sort(c.begin(), c.end(), ranks_before);
    cand_t last = c.empty() ? cand_t{0.0f, -1} : c.back();
    double acc = above;
    for (const cand_t & e : c) {
        acc += e.first;
        if (acc >= mass) {
            last = e;
            break;
        }
    }
    // kept: every entry above bucket b, and bucket b's entries ranked up to `last`, in id order
    int32_t w = 0;
    for (int32_t i = 0; i < d.n; ++i) {
        const int bi = bucket(d.probs[i]);
        if (bi > b || (bi == b && !ranks_before(last, cand_t{d.probs[i], i}))) {
            d.ids[w] = i;
            d.probs[w++] = d.probs[i];
        }
    }
    d.dense = false;
    d.n = w;
}

// transform()'s answer for a row where no token the mask allows has a finite logit: no error
// in itself (a trimmed head under a grammar has no draft there); the callers decide.
constexpr int NOTHING_ALLOWED = 1;

// d = the distribution of one row. conf (may be NULL): the largest probability (greedy: the
// argmax's softmax probability at temperature 1). PYMTP_OK, or NOTHING_ALLOWED.
int transform(pymtp_sampler * s, const float * row, const int32_t * win, int32_t n_win, const uint32_t * mask,
              dist & d, float * conf) {
    const int32_t V = s->n_vocab;
    const pymtp_sampling_params & c = s->params;
    const float * x = adjusted(s, row, win, n_win, mask);
    if (greedy(s)) {
        float m;
        const int32_t best = row_argmax(x, V, &m);
        if (m == NEG_INF) return NOTHING_ALLOWED;
        d.point(best);
        if (conf) *conf = (float) (1.0 / exp_sum(x, V, m, 1.0f));
        return PYMTP_OK;
    }
    const float inv_t = 1.0f / c.temperature;
    double total = 0.0;
    if (c.top_k > 0 && c.top_k < V) {
        top_k(s, x, c.top_k);
        std::sort(s->cand.begin(), s->cand.end(),
                  [](const std::pair<float, int32_t> & a, const std::pair<float, int32_t> & b) { return a.second < b.second; });
        float m = NEG_INF;
        for (auto & e : s->cand) m = std::max(m, e.first);
        if (m == NEG_INF) return NOTHING_ALLOWED;
        d.dense = false;
        d.n = 0;
        for (auto & e : s->cand) {
            if (e.first == NEG_INF) continue;
            const float w = exp_nonpos((e.first - m) * inv_t);
            d.ids[d.n] = e.second;
            d.probs[d.n++] = w;
            total += w;
        }
    } else {
        float m;
        row_argmax(x, V, &m);
        if (m == NEG_INF) return NOTHING_ALLOWED;
        d.dense = true;
        d.n = V;
        total = exp_shifted(x, V, m, inv_t, d.probs.data());
    }
    if (c.top_p < 1.0f) keep_nucleus(s, d, (double) c.top_p * total);
    if (c.min_p > 0.0f) {
        float wmax = 0.0f;
        for (int32_t i = 0; i < d.n; ++i) wmax = std::max(wmax, d.probs[i]);
        const float thr = c.min_p * wmax;
        int32_t w = 0;
        for (int32_t i = 0; i < d.n; ++i) {
            if (d.probs[i] >= thr) {
                d.ids[w] = d.id(i);
                d.probs[w++] = d.probs[i];
            }
        }
        d.dense = false;
        d.n = w;
    }
    if (c.top_p < 1.0f || c.min_p > 0.0f) {
        total = 0.0;
        for (int32_t i = 0; i < d.n; ++i) total += d.probs[i];
    }
    const float inv = (float) (1.0 / total);
    float pmax = 0.0f;
    for (int32_t i = 0; i < d.n; ++i) {
        d.probs[i] *= inv;
        pmax = d.probs[i] > pmax ? d.probs[i] : pmax;
    }
    if (conf) *conf = pmax;
    return PYMTP_OK;
}

int check_tokens(const pymtp_sampler * s, const int32_t * t, int32_t n, const char * what) {
    if (n > 0 && !t) return fail(PYMTP_ERR_ARG, "%s: NULL with %d tokens", what, n);
    for (int32_t i = 0; i < n; ++i) {
        if (t[i] < 0 || t[i] >= s->n_vocab) {
            return fail(PYMTP_ERR_ARG, "%s: token %d at index %d is outside the vocabulary [0, %d)",
                        what, t[i], i, s->n_vocab);
        }
    }
    return PYMTP_OK;
}

int check_slot(const pymtp_sampler * s, int32_t slot) {
    if (!s) return fail(PYMTP_ERR_HANDLE, "no sampler");
    if (slot < 0 || slot >= (int32_t) s->slots.size()) {
        return fail(PYMTP_ERR_ARG, "slot %d out of range [0, %zu)", slot, s->slots.size());
    }
    return PYMTP_OK;
}

}  // namespace

int pymtp_sampler_create(int32_t n_vocab, int32_t n_slots, pymtp_sampler ** out) {
    if (!out) return fail(PYMTP_ERR_ARG, "out is NULL");
    *out = nullptr;
    if (n_vocab < 1 || n_slots < 1 || n_slots > 256) {
        return fail(PYMTP_ERR_ARG, "need n_vocab >= 1 and 1 <= n_slots <= 256 (got %d, %d)", n_vocab, n_slots);
    }
    pymtp_sampler * s = new (std::nothrow) pymtp_sampler();
    if (!s) return fail(PYMTP_ERR_NOSPACE, "out of memory");
    try {
        s->n_vocab = n_vocab;
        s->slots.resize(n_slots);
        for (auto & d : s->slots) {
            d.ids.resize(n_vocab);
            d.probs.resize(n_vocab);
            d.point(0);
        }
        s->p.ids.resize(n_vocab);
        s->p.probs.resize(n_vocab);
        s->x.resize(n_vocab);
        s->scratch.resize(n_vocab);
        s->counts.assign(n_vocab, 0);
        s->touched.reserve(n_vocab);
        s->qdense.assign(n_vocab, 0.0f);
        s->cand.reserve(n_vocab);
        s->params = pymtp_sampling_params{0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0};
    } catch (const std::bad_alloc &) {
        delete s;
        return fail(PYMTP_ERR_NOSPACE, "out of memory for a %d-token vocabulary", n_vocab);
    }
    *out = s;
    return ok();
}

int pymtp_sampler_free(pymtp_sampler * s) {
    delete s;
    return ok();
}

int pymtp_sampler_configure(pymtp_sampler * s, const pymtp_sampling_params * p, const int32_t * bias_ids,
                            const float * bias_values, int32_t n_bias) {
    if (!s || !p) return fail(PYMTP_ERR_ARG, "NULL sampler or params");
    if (!(p->temperature >= 0.0f) || !(p->top_p > 0.0f && p->top_p <= 1.0f) || !(p->min_p >= 0.0f && p->min_p < 1.0f) ||
        !(p->repetition_penalty > 0.0f) || p->top_k < 0 || p->penalty_window < 0 ||
        !std::isfinite(p->presence_penalty) || !std::isfinite(p->frequency_penalty) || (p->coupled != 0 && p->coupled != 1)) {
        return fail(PYMTP_ERR_ARG, "bad sampling parameters");
    }
    if (n_bias < 0 || (n_bias > 0 && (!bias_ids || !bias_values))) return fail(PYMTP_ERR_ARG, "bad logit bias arrays");
    if (int rc = check_tokens(s, bias_ids, n_bias, "logit bias")) return rc;
    for (int32_t i = 0; i < n_bias; ++i) {
        if (std::isnan(bias_values[i])) return fail(PYMTP_ERR_ARG, "logit bias of token %d is NaN", bias_ids[i]);
    }
    try {
        s->params = *p;
        s->penalizes = p->penalty_window > 0 &&
                       (p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
        s->bias_ids.assign(bias_ids, bias_ids + n_bias);
        s->bias_vals.assign(bias_values, bias_values + n_bias);
        s->window.resize((size_t) p->penalty_window + 1);
    } catch (const std::bad_alloc &) {
        return fail(PYMTP_ERR_NOSPACE, "out of memory");
    }
    return ok();
}

int pymtp_sampler_row(pymtp_sampler * s, int32_t slot, const float * row, const int32_t * history, int32_t n_history,
                      const uint32_t * mask, double u, int64_t position, int32_t * out_token, float * out_conf) {
    if (int rc = check_slot(s, slot)) return rc;
    if (!row || !out_token || n_history < 0) return fail(PYMTP_ERR_ARG, "bad sampler_row arguments");
    if (s->params.coupled && position < 0) return fail(PYMTP_ERR_ARG, "coupled draws need a position >= 0, got %lld", (long long) position);
    if (int rc = check_tokens(s, history, n_history, "history")) return rc;
    int32_t n_win = 0;
    const int32_t * win = compose_window(s, history, n_history, nullptr, 0, &n_win);
    dist & d = s->slots[slot];
    if (transform(s, row, win, n_win, mask, d, out_conf) == NOTHING_ALLOWED) {
        *out_token = -1;                         // e.g. a trimmed head under a grammar: no draft here
        if (out_conf) *out_conf = 0.0f;
        d.point(0);
        d.probs[0] = 0.0f;
        return ok();
    }
    if (greedy(s) || u < 0.0) {
        *out_token = greedy(s) ? d.ids[0] : -1;
    } else {
        *out_token = draw_token(s->params, d, d.probs.data(), u, position);
    }
    return ok();
}

int pymtp_sampler_top(pymtp_sampler * s, const float * row, const int32_t * history, int32_t n_history,
                      const uint32_t * mask, int32_t n, int32_t * out_ids, float * out_logprobs, int32_t * out_n) {
    if (!s || !row || !out_ids || !out_logprobs || !out_n || n_history < 0) return fail(PYMTP_ERR_ARG, "bad sampler_top arguments");
    if (n < 1 || n > 20) return fail(PYMTP_ERR_ARG, "top: n must be in [1, 20], got %d", n);
    if (int rc = check_tokens(s, history, n_history, "history")) return rc;
    *out_n = 0;
    int32_t n_win = 0;
    const int32_t * win = compose_window(s, history, n_history, nullptr, 0, &n_win);
    const int32_t V = s->n_vocab;
    auto & c = s->cand;
    double lse = 0.0;                            // log of the normalizer of c's values
    if (greedy(s)) {
        const float * x = adjusted(s, row, win, n_win, mask);
        float m;
        row_argmax(x, V, &m);
        if (m == NEG_INF) return ok();
        lse = m + std::log(exp_sum(x, V, m, 1.0f));
        top_k(s, x, std::min(n, V));
    } else {
        dist & d = s->p;                         // the verify's scratch distribution
        if (transform(s, row, win, n_win, mask, d, nullptr) == NOTHING_ALLOWED) return ok();
        c.clear();
        for (int32_t i = 0; i < d.n; ++i) c.emplace_back(d.probs[i] > 0.0f ? std::log(d.probs[i]) : NEG_INF, d.id(i));
        const int32_t k = std::min<int32_t>(n, (int32_t) c.size());
        std::partial_sort(c.begin(), c.begin() + k, c.end(), ranks_before);
        c.resize(k);
    }
    std::sort(c.begin(), c.end(), ranks_before);
    for (const auto & e : c) {
        if (e.first == NEG_INF) continue;
        out_ids[*out_n] = e.second;
        out_logprobs[(*out_n)++] = (float) (e.first - lse);
    }
    return ok();
}

int pymtp_sampler_set_point(pymtp_sampler * s, int32_t slot, int32_t token) {
    if (int rc = check_slot(s, slot)) return rc;
    if (int rc = check_tokens(s, &token, 1, "point mass")) return rc;
    s->slots[slot].point(token);
    return ok();
}

int pymtp_sampler_set_dense(pymtp_sampler * s, int32_t slot, const float * q) {
    if (int rc = check_slot(s, slot)) return rc;
    if (!q) return fail(PYMTP_ERR_ARG, "q is NULL");
    dist & d = s->slots[slot];
    d.dense = true;
    d.n = s->n_vocab;
    std::memcpy(d.probs.data(), q, sizeof(float) * s->n_vocab);
    return ok();
}

int pymtp_sampler_slot(const pymtp_sampler * s, int32_t slot, int32_t * n, const int32_t ** ids, const float ** probs) {
    if (int rc = check_slot(s, slot)) return rc;
    if (!n || !ids || !probs) return fail(PYMTP_ERR_ARG, "NULL output");
    const dist & d = s->slots[slot];
    *n = d.n;
    *ids = d.dense ? nullptr : d.ids.data();
    *probs = d.probs.data();
    return ok();
}

int pymtp_sampler_verify(pymtp_sampler * s, const float * rows, const int32_t * draft, int32_t k,
                         const int32_t * history, int32_t n_history, const uint32_t * masks, const double * u,
                         int64_t position, int32_t * out_n_acc, int32_t * out_token, float * out_probs) {
    if (!s) return fail(PYMTP_ERR_HANDLE, "no sampler");
    if (!rows || !out_n_acc || !out_token || k < 0 || n_history < 0) return fail(PYMTP_ERR_ARG, "bad verify arguments");
    if (k > (int32_t) s->slots.size()) return fail(PYMTP_ERR_ARG, "a draft of %d tokens needs %d q slots (have %zu)", k, k, s->slots.size());
    const bool coupled = !greedy(s) && s->params.coupled;
    if (!greedy(s) && !coupled && !u) return fail(PYMTP_ERR_ARG, "sampling needs k + 1 uniforms");
    if (coupled && position < 0) return fail(PYMTP_ERR_ARG, "coupled sampling needs a position >= 0, got %lld", (long long) position);
    if (int rc = check_tokens(s, draft, k, "draft")) return rc;
    if (int rc = check_tokens(s, history, n_history, "history")) return rc;
    const int32_t V = s->n_vocab;
    const size_t mask_words = ((size_t) V + 31) / 32;
    const bool plain_argmax = greedy(s) && !s->penalizes && s->bias_ids.empty() && !masks && !out_probs;
    for (int32_t i = 0; i <= k; ++i) {
        const float * row = rows + (size_t) i * V;
        const uint32_t * mask = masks ? masks + i * mask_words : nullptr;
        int32_t tok;
        if (plain_argmax) {
            tok = row_argmax(row, V, nullptr);
        } else {
            int32_t n_win = 0;
            const int32_t * win = compose_window(s, history, n_history, draft, i, &n_win);
            // greedy: the argmax's softmax probability is its p (for logprobs)
            float * conf = greedy(s) && out_probs ? &out_probs[i] : nullptr;
            if (transform(s, row, win, n_win, mask, s->p, conf) == NOTHING_ALLOWED) {
                return fail(PYMTP_ERR_ARG, "the mask allows no token at verify row %d", i);
            }
            if (greedy(s)) {
                tok = s->p.ids[0];
            } else if (coupled) {
                // the token plain decoding draws here; the draft survives only if it is that token
                tok = draw_token(s->params, s->p, s->p.probs.data(), 0.0, position + i);
                if (out_probs) out_probs[i] = s->p.prob_of(tok);
                if (i < k && tok == draft[i]) continue;
            } else if (i < k) {
                const int32_t d = draft[i];
                const dist & q = s->slots[i];
                const float pd = s->p.prob_of(d);
                if (u[i] * (double) q.prob_of(d) < (double) pd) {       // accept with probability min(1, p/q)
                    if (out_probs) out_probs[i] = pd;
                    continue;
                }
                // Rejected: draw from normalize(max(0, p - q)) over p's support (q's outside it
                // adds nothing); when that is empty p == q and a rejection has probability 0.
                if (!q.dense) {
                    for (int32_t j = 0; j < q.n; ++j) s->qdense[q.ids[j]] = q.probs[j];
                }
                const float * qv = q.dense ? q.probs.data() : s->qdense.data();
                float * r = s->scratch.data();
                double total = 0.0;
                for (int32_t j = 0; j < s->p.n; ++j) {
                    const float diff = s->p.probs[j] - qv[s->p.id(j)];
                    r[j] = diff > 0.0f ? diff : 0.0f;
                    total += r[j];
                }
                if (!q.dense) {
                    for (int32_t j = 0; j < q.n; ++j) s->qdense[q.ids[j]] = 0.0f;
                }
                const double uu = std::min(u[k], 1.0);
                tok = s->p.id(draw_index(total > 0.0 ? r : s->p.probs.data(), s->p.n, uu));
                if (out_probs) out_probs[i] = s->p.prob_of(tok);
                *out_n_acc = i;
                *out_token = tok;
                return ok();
            } else {
                tok = s->p.id(draw_index(s->p.probs.data(), s->p.n, std::min(u[k], 1.0)));
                if (out_probs) out_probs[i] = s->p.prob_of(tok);
            }
        }
        if (i < k && greedy(s) && tok == draft[i]) continue;
        *out_n_acc = i;
        *out_token = tok;
        return ok();
    }
    return fail(PYMTP_ERR_ARG, "unreachable");   // every path above returns at i == k
}
