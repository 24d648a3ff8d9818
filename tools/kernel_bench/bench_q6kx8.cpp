// The repacked Q6_K small-batch kernel alone (ggml_cpu_small_batch_q6_K_8x8, small-batch-q6kx8.cpp,
// patch 0008): checks and times it.
//
// Check: random Q6_K rows (and a pass with extreme values: quants 0 and 63, scales -128 and
// 127, activations -128 and 127), interleaved here into block_q6_Kx8 as repack.cpp does, times
// n = 1..8 rows of Q8_K activations. Every output must be bitwise equal to a scalar reference
// that computes each super-block's exact integer from the plain block_q6_K (ggml's layout)
// and adds it with the kernel's one fma: so the kernel's integers are exact (nothing
// saturates) and a row's bits do not depend on n. Exits 1 on any difference.
// Time: k = 2048 by NC columns, 1 thread, n = 1, 2, 4, 8: median and minimum ms over REPS, and
// a hash of the bits of every output (equal hashes: equal bits, e.g. between an AVX2 and an
// AVX-512 compile).
//
//   L=/path/to/patched/llama.cpp
//   g++ -O3 -march=native -std=gnu++17 -I$L/ggml/include -I$L/ggml/src -I$L/ggml/src/ggml-cpu \
//       tools/kernel_bench/bench_q6kx8.cpp $L/ggml/src/ggml-cpu/small-batch-q6kx8.cpp -o bench_q6kx8
//   ./bench_q6kx8 16384 25                 # NC REPS; -march=x86-64-v3 for the AVX2 code
#define GGML_COMMON_DECL_CPP
#include "ggml-common.h"
#include "repack.h"
#include "small-batch.h"
#include "small-batch-q6kx8.h"
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <immintrin.h>
#include <random>
#include <vector>

static float h2f(ggml_half h) { return _cvtsh_ss(h); }

// 8 plain blocks (one per weight row) -> one block_q6_Kx8, 8-byte interleave
static block_q6_Kx8 interleave(const block_q6_K * in) {
    block_q6_Kx8 out;
    for (int c = 0; c < 8; ++c) out.d[c] = in[c].d;
    for (int t = 0; t < 16; ++t) for (int c = 0; c < 8; ++c) memcpy(out.ql + 64 * t + 8 * c, in[c].ql + 8 * t, 8);
    for (int u = 0; u < 8; ++u)  for (int c = 0; c < 8; ++c) memcpy(out.qh + 64 * u + 8 * c, in[c].qh + 8 * u, 8);
    for (int j = 0; j < 16; ++j) for (int c = 0; c < 8; ++c) out.scales[8 * j + c] = in[c].scales[j];
    return out;
}

// one row's output for one weight row: the exact integer per super-block, one fma each
static float reference(const block_q6_K * w, const block_q8_K * x, int nb) {
    float acc = 0.0f;
    for (int b = 0; b < nb; ++b) {
        int8_t q[QK_K];
        for (int h = 0; h < 2; ++h) {
            const uint8_t * ql = w[b].ql + 64 * h;
            const uint8_t * qh = w[b].qh + 32 * h;
            for (int l = 0; l < 32; ++l) {
                q[128 * h + l]      = (int8_t) (((ql[l] & 0xF)      | ((qh[l] >> 0) & 3) << 4) - 32);
                q[128 * h + l + 32] = (int8_t) (((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32);
                q[128 * h + l + 64] = (int8_t) (((ql[l] >> 4)       | ((qh[l] >> 4) & 3) << 4) - 32);
                q[128 * h + l + 96] = (int8_t) (((ql[l + 32] >> 4)  | ((qh[l] >> 6) & 3) << 4) - 32);
            }
        }
        int64_t I = 0;
        for (int g = 0; g < 16; ++g) {
            int64_t s = 0;
            for (int i = 0; i < 16; ++i) s += q[16 * g + i] * x[b].qs[16 * g + i];
            I += s * w[b].scales[g];
        }
        if (I != (int32_t) I) { fprintf(stderr, "reference integer overflows int32\n"); exit(2); }
        acc = std::fma((float) I, h2f(w[b].d) * x[b].d, acc);
    }
    return acc;
}

static void fill_x(block_q8_K & b, std::mt19937 & rng, bool extreme) {
    for (int i = 0; i < QK_K; ++i) b.qs[i] = extreme ? (rng() & 1 ? 127 : -128) : (int8_t) (rng() % 256 - 128);
    for (int s = 0; s < 16; ++s) { int t = 0; for (int i = 0; i < 16; ++i) t += b.qs[16 * s + i]; b.bsums[s] = t; }
    b.d = 0.01f + (rng() % 100) * 1e-4f;
}

static void fill_w(block_q6_K & b, std::mt19937 & rng, bool extreme) {
    for (auto & v : b.ql) v = extreme ? (rng() & 1 ? 0xFF : 0x00) : (uint8_t) rng();
    for (auto & v : b.qh) v = extreme ? (rng() & 1 ? 0xFF : 0x00) : (uint8_t) rng();
    for (auto & v : b.scales) v = extreme ? (rng() & 1 ? 127 : -128) : (int8_t) rng();
    b.d = 0x1400 + (rng() & 0xff);
}

// every output of n = 1..8 rows against the reference, bitwise; returns the number of differences
static int check(int k, int nc, bool extreme, unsigned seed) {
    const int nb = k / QK_K;
    std::mt19937 rng(seed);
    std::vector<block_q6_K> plain((size_t) nc * nb);
    for (auto & b : plain) fill_w(b, rng, extreme);
    std::vector<block_q6_Kx8> w((size_t) nc / 8 * nb);
    for (int x = 0; x < nc / 8; ++x) for (int b = 0; b < nb; ++b) {
        block_q6_K in[8];
        for (int c = 0; c < 8; ++c) in[c] = plain[(size_t) (8 * x + c) * nb + b];
        w[(size_t) x * nb + b] = interleave(in);
    }
    std::vector<block_q8_K> xs(8 * nb);
    for (auto & b : xs) fill_x(b, rng, extreme);
    std::vector<float> out(8 * (size_t) nc);
    int bad = 0;
    for (int n = 1; n <= 8; ++n) {
        if (!ggml_cpu_small_batch_q6_K_8x8(k, out.data(), nc, w.data(), xs.data(), nb * sizeof(block_q8_K), n, nc)) {
            fprintf(stderr, "no kernel in this build\n");
            return 1;
        }
        for (int r = 0; r < n; ++r) for (int c = 0; c < nc; ++c) {
            const float want = reference(&plain[(size_t) c * nb], &xs[(size_t) r * nb], nb);
            if (memcmp(&want, &out[(size_t) r * nc + c], 4) != 0) {
                if (bad++ < 5) fprintf(stderr, "n=%d row %d col %d: %.9g, want %.9g\n", n, r, c, out[(size_t) r * nc + c], want);
            }
        }
    }
    printf("check k=%d nc=%d %s: %d differences\n", k, nc, extreme ? "extreme" : "random", bad);
    return bad;
}

int main(int argc, char ** argv) {
    int bad = check(768, 64, false, 3) + check(2048, 128, false, 4) + check(1024, 64, true, 5);
    if (bad) return 1;

    const int k = 2048, nc = argc > 1 ? atoi(argv[1]) : 16384;   // 2048 x 16384: 27.5 MB
    const int reps = argc > 2 ? atoi(argv[2]) : 15;
    const int nb = k / QK_K;
    std::mt19937 rng(1);
    std::vector<block_q6_Kx8> w((size_t) nc / 8 * nb);
    for (auto & b : w) {
        uint8_t * p = (uint8_t *) &b;
        for (size_t i = 0; i < sizeof(b); ++i) p[i] = rng();
        for (int c = 0; c < 8; ++c) b.d[c] = 0x1400 + (rng() & 0xff);
    }
    std::vector<block_q8_K> x(8 * nb);
    for (auto & b : x) fill_x(b, rng, false);
    std::vector<float> out(8 * (size_t) nc);
    double sum = 0;
    for (int n : {1, 2, 4, 8}) {
        std::vector<double> t;
        for (int r = 0; r < reps; ++r) {
            auto t0 = std::chrono::steady_clock::now();
            ggml_cpu_small_batch_q6_K_8x8(k, out.data(), nc, w.data(), x.data(), nb * sizeof(block_q8_K), n, nc);
            auto t1 = std::chrono::steady_clock::now();
            t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
            sum += out[0];
        }
        std::sort(t.begin(), t.end());
        uint64_t h = 1469598103934665603ull;
        for (int64_t i = 0; i < (int64_t) n * nc; ++i) { uint32_t u; memcpy(&u, &out[i], 4); h = (h ^ u) * 1099511628211ull; }
        printf("n=%d %.3f ms (min %.3f) hash %016llx\n", n, t[t.size() / 2], t[0], (unsigned long long) h);
    }
    printf("# %g\n", sum);
}
