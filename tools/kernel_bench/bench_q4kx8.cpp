// The repacked Q4_K small-batch kernel alone (ggml_cpu_small_batch_q4_K_8x8, small-batch-q4kx8.cpp)
// on random block_q4_Kx8 weights, k = 2048 by NC columns, 1 thread, n = 1, 2, 4, 8 rows of
// Q8_K activations: median and minimum milliseconds over REPS runs, and a hash of the bits of
// every output (equal hashes: equal bits, e.g. between two versions of the kernel or between
// an AVX2 and an AVX-512 compile).
//
//   L=/path/to/patched/llama.cpp
//   g++ -O3 -march=native -std=gnu++17 -I$L/ggml/include -I$L/ggml/src -I$L/ggml/src/ggml-cpu \
//       tools/kernel_bench/bench_q4kx8.cpp $L/ggml/src/ggml-cpu/small-batch-q4kx8.cpp -o bench_q4kx8
//   ./bench_q4kx8 16384 25                 # NC REPS; -march=x86-64-v3 for the AVX2 code
#define GGML_COMMON_DECL_CPP
#include "ggml-common.h"
#include "repack.h"
#include "small-batch.h"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <random>

int main(int argc, char ** argv) {
    const int k = 2048, nc = argc > 1 ? atoi(argv[1]) : 16384;   // 2048 x 16384: 18.9 MB
    const int reps = argc > 2 ? atoi(argv[2]) : 15;
    const int nb = k / QK_K;
    std::mt19937 rng(1);
    std::vector<block_q4_Kx8> w((size_t) nc / 8 * nb);
    for (auto & b : w) {
        uint8_t * p = (uint8_t *) &b;
        for (size_t i = 0; i < sizeof(b); ++i) p[i] = rng();
        for (int c = 0; c < 8; ++c) { b.d[c] = 0x1400 + (rng() & 0xff); b.dmin[c] = 0x1000 + (rng() & 0xff); }
    }
    std::vector<block_q8_K> x(8 * nb);
    for (auto & b : x) {
        for (int i = 0; i < QK_K; ++i) b.qs[i] = (int8_t) (rng() % 255 - 127);
        for (int s = 0; s < 16; ++s) { int t = 0; for (int i = 0; i < 16; ++i) t += b.qs[16 * s + i]; b.bsums[s] = t; }
        b.d = 0.01f;
    }
    std::vector<float> out(8 * (size_t) nc);
    double sum = 0;
    for (int n : {1, 2, 4, 8}) {
        std::vector<double> t;
        for (int r = 0; r < reps; ++r) {
            auto t0 = std::chrono::steady_clock::now();
            ggml_cpu_small_batch_q4_K_8x8(k, out.data(), nc, w.data(), x.data(), nb * sizeof(block_q8_K), n, nc);
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
