// F16 small-batch tile shapes on the default model's trunk, alone: every product of one decode
// (30 blocks of q, k, v, o, gate, up, down, then the tied 49152 x 576 output), one thread,
// n = 1..4 activation rows. Each shape reduces each output exactly as 0004's float_tile does
// (one 16-lane accumulator, fma over k in order, the same fold), so all shapes must give the
// same bits: the program checks it. Prints the median ms per decode of each shape and n.
//
//   g++ -O3 -march=native -std=gnu++17 tools/kernel_bench/bench_f16_tiles.cpp -o /tmp/bench_f16_tiles
//   /work/tools/bench-quiet /tmp/bench_f16_tiles 9     # REPS
#include <immintrin.h>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

static inline float fold8(__m256 s) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}
static inline float fold16(__m512 v) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return fold8(_mm256_add_ps(_mm512_castps512_ps256(v), hi));
}
static inline __m512 ldh(const uint16_t * p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) p)); }

struct mat { int64_t k, m; uint16_t * w; };

// the shape of 0004 today: one weight row x G rows, 2 KB prefetch from G >= 2
template <int G, int PF, int HINT = _MM_HINT_T0, int EVERY = 1>
static void one_row(const mat & a, const float * const * x, float * const * y) {
    for (int64_t r = 0; r < a.m; ++r) {
        const uint16_t * w = a.w + r * a.k;
        __m512 acc[G];
        for (int j = 0; j < G; ++j) acc[j] = _mm512_setzero_ps();
        for (int64_t i = 0; i < a.k; i += 16) {
            if (PF && (i / 16) % EVERY == 0) _mm_prefetch((const char *) (w + i) + PF, (_mm_hint) HINT);
            const __m512 wv = ldh(w + i);
            for (int j = 0; j < G; ++j) acc[j] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x[j] + i), acc[j]);
        }
        for (int j = 0; j < G; ++j) y[j][r] = fold16(acc[j]);
    }
}

// R adjacent weight rows x G rows: each activation vector loaded once for R rows
template <int R, int G, int PF, int HINT = _MM_HINT_T0>
static void rows_block(const mat & a, const float * const * x, float * const * y) {
    int64_t r = 0;
    for (; r + R <= a.m; r += R) {
        const uint16_t * w = a.w + r * a.k;
        __m512 acc[R][G];
        for (int q = 0; q < R; ++q) for (int j = 0; j < G; ++j) acc[q][j] = _mm512_setzero_ps();
        for (int64_t i = 0; i < a.k; i += 16) {
            __m512 wv[R];
            for (int q = 0; q < R; ++q) {
                if (PF) _mm_prefetch((const char *) (w + q * a.k + i) + PF, (_mm_hint) HINT);
                wv[q] = ldh(w + q * a.k + i);
            }
            for (int j = 0; j < G; ++j) {
                const __m512 xv = _mm512_loadu_ps(x[j] + i);
                for (int q = 0; q < R; ++q) acc[q][j] = _mm512_fmadd_ps(wv[q], xv, acc[q][j]);
            }
        }
        for (int q = 0; q < R; ++q) for (int j = 0; j < G; ++j) y[j][r + q] = fold16(acc[q][j]);
    }
    for (; r < a.m; ++r) {  // the rest one row at a time
        mat one = { a.k, 1, a.w + r * a.k };
        float * yy[8];
        for (int j = 0; j < G; ++j) yy[j] = y[j] + r;
        one_row<G, 0>(one, x, yy);
    }
}

typedef void (*shape_fn)(const mat &, const float * const *, float * const *);
struct shape { const char * name; shape_fn f[4]; };

#define SHAPES(T, ...) { T<1, ##__VA_ARGS__>, T<2, ##__VA_ARGS__>, T<3, ##__VA_ARGS__>, T<4, ##__VA_ARGS__> }
template <int G> static void cur(const mat & a, const float * const * x, float * const * y) {
    if (G >= 2) one_row<G, 2048>(a, x, y); else one_row<G, 0>(a, x, y);
}
template <int G> static void nopf(const mat & a, const float * const * x, float * const * y) { one_row<G, 0>(a, x, y); }
#define ONE(name, PF, H) template <int G> static void name(const mat & a, const float * const * x, float * const * y) { one_row<G, PF, H>(a, x, y); }
#define ONE2(name, PF, H) template <int G> static void name(const mat & a, const float * const * x, float * const * y) { one_row<G, PF, H, 2>(a, x, y); }
#define BLK(name, R, PF, H) template <int G> static void name(const mat & a, const float * const * x, float * const * y) { rows_block<R, G, PF, H>(a, x, y); }
ONE(l2_4k, 4096, _MM_HINT_T1)
ONE(l2_8k, 8192, _MM_HINT_T1)
ONE(l2_16k, 16384, _MM_HINT_T1)
ONE(l2_32k, 32768, _MM_HINT_T1)
ONE2(l2_8k_h, 8192, _MM_HINT_T1)
ONE2(l2_16k_h, 16384, _MM_HINT_T1)
BLK(r2_l2_8k, 2, 8192, _MM_HINT_T1)
BLK(r2_l2_16k, 2, 16384, _MM_HINT_T1)
BLK(r4_l2_8k, 4, 8192, _MM_HINT_T1)

int main(int argc, char ** argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 9;
    const int only_s = argc > 2 ? atoi(argv[2]) : -1;   // one shape (its index) ...
    const int only_g = argc > 3 ? atoi(argv[3]) : 0;    // ... at one n, for perf
    std::vector<mat> mats;
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    auto add = [&](int64_t k, int64_t m) {
        mat a = { k, m, (uint16_t *) aligned_alloc(64, k * m * 2) };
        for (int64_t i = 0; i < k * m; ++i) a.w[i] = _cvtss_sh(nd(rng) * 0.05f, 0);
        mats.push_back(a);
    };
    for (int l = 0; l < 30; ++l) {
        add(576, 576); add(576, 192); add(576, 192); add(576, 576);
        add(576, 1536); add(576, 1536); add(1536, 576);
    }
    add(576, 49152);
    std::vector<float> xs(4 * 1536), ys_ref[4], ys[4];
    for (auto & v : xs) v = nd(rng);
    const float * x[4];
    for (int j = 0; j < 4; ++j) x[j] = xs.data() + j * 1536;
    for (int j = 0; j < 4; ++j) { ys_ref[j].resize(49152); ys[j].resize(49152); }

    const shape shapes[] = {
        { "cur (1 row, pf 2K from G2)", SHAPES(cur) },
        { "1 row, no pf", SHAPES(nopf) },
        { "1 row, pf 4K L2", SHAPES(l2_4k) },
        { "1 row, pf 8K L2", SHAPES(l2_8k) },
        { "1 row, pf 16K L2", SHAPES(l2_16k) },
        { "1 row, pf 32K L2", SHAPES(l2_32k) },
        { "1 row, pf 8K L2 /64B", SHAPES(l2_8k_h) },
        { "1 row, pf 16K L2 /64B", SHAPES(l2_16k_h) },
        { "2 rows, pf 8K L2", SHAPES(r2_l2_8k) },
        { "2 rows, pf 16K L2", SHAPES(r2_l2_16k) },
        { "4 rows, pf 8K L2", SHAPES(r4_l2_8k) },
    };
    const int ns = sizeof(shapes) / sizeof(shapes[0]);
    // bits: every shape against cur, on the output matrix (the last)
    for (int g = 0; g < 4; ++g) {
        float * yr[4] = { ys_ref[0].data(), ys_ref[1].data(), ys_ref[2].data(), ys_ref[3].data() };
        shapes[0].f[g](mats.back(), x, yr);
        for (int s = 1; s < ns; ++s) {
            float * yy[4] = { ys[0].data(), ys[1].data(), ys[2].data(), ys[3].data() };
            shapes[s].f[g](mats.back(), x, yy);
            for (int j = 0; j <= g; ++j)
                if (memcmp(ys[j].data(), ys_ref[j].data(), 49152 * 4) != 0) { printf("BITS DIFFER: %s G=%d row %d\n", shapes[s].name, g + 1, j); return 1; }
        }
    }
    printf("all shapes bitwise equal at n = 1..4\n");
    std::vector<double> t[32][4];
    std::vector<float> scratch(4 * 49152);
    float * y[4] = { scratch.data(), scratch.data() + 49152, scratch.data() + 2 * 49152, scratch.data() + 3 * 49152 };
    for (int rep = 0; rep < reps; ++rep) {
        for (int g = 0; g < 4; ++g) {
            for (int s = 0; s < ns; ++s) {  // interleaved: shape after shape, every rep
                if ((only_s >= 0 && s != only_s) || (only_g > 0 && g + 1 != only_g)) continue;
                auto t0 = std::chrono::steady_clock::now();
                for (const mat & a : mats) shapes[s].f[g](a, x, y);
                auto t1 = std::chrono::steady_clock::now();
                t[s][g].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
            }
        }
    }
    printf("%-28s %8s %8s %8s %8s   (median ms per decode, 1 thread; x: / its n=1)\n", "shape", "n=1", "n=2", "n=3", "n=4");
    for (int s = 0; s < ns; ++s) {
        double m[4];
        if (t[s][3].empty() || t[s][0].empty()) continue;
        for (int g = 0; g < 4; ++g) { std::sort(t[s][g].begin(), t[s][g].end()); m[g] = t[s][g][t[s][g].size() / 2]; }
        printf("%-28s %8.2f %8.2f %8.2f %8.2f   x %.2f %.2f %.2f\n", shapes[s].name, m[0], m[1], m[2], m[3], m[1] / m[0], m[2] / m[0], m[3] / m[0]);
    }
    return 0;
}
