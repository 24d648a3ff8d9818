// Two or more versions of small-batch.cpp's K-quant tiles (Q6_K, Q5_K, Q4_K weights, Q8_K
// activations), interleaved in one process: k = 2048 by M random weight rows, 1 thread,
// n = 1, 2, 4, 8 activation rows; per version the median / minimum milliseconds over REPS rounds
// and "BITS!" where its outputs differ from the first version's. M = 2048 stays in cache (the
// kernels' arithmetic), M = 65536 (110 MB of Q6_K) streams from memory.
//
//   L=/work/k9-llama; B=build-k9/llama.cpp/ggml/src; I="-I$L/ggml/include -I$L/ggml/src -I$L/ggml/src/ggml-cpu"
//   for i in 0 1; do   # SRC0 = the old small-batch.cpp (e.g. from git show), SRC1 = the new one
//     g++ -O3 -march=native -std=gnu++17 $I "-DSB_SRC=\"$(eval echo \$SRC$i)\"" -DWRAP=tw$i \
//       -Dggml_cpu_small_batch_mul_mat=sbmm$i -Dggml_cpu_small_batch_mul_mat_supported=sbms$i \
//       -Dggml_cpu_small_batch_reads_f32=sbrf$i -Dggml_cpu_small_batch_quantize_q8_K=sbq$i \
//       -c tools/kernel_bench/sb_tile_wrap.cpp -o tw$i.o
//   done
//   g++ -O2 -march=native -std=gnu++17 $I '-DVARIANTS=X(tw0, "old") X(tw1, "new")' \
//       tools/kernel_bench/bench_tile_variants.cpp tw0.o tw1.o $B/libggml-cpu.a $B/libggml-base.a -fopenmp -o btv
//   ./btv q6_K 65536 21          # TYPE (q6_K, q5_K, q4_K) M REPS
#define GGML_COMMON_DECL_CPP
#include "ggml-common.h"
#include "ggml.h"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

typedef void (*tiles_fn)(int, int64_t, const char *, size_t, int64_t, int, const char * const *, float * const *);
#define X(fn, name) extern "C" void fn(int, int64_t, const char *, size_t, int64_t, int, const char * const *, float * const *);
VARIANTS
#undef X

int main(int argc, char ** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s q6_K|q5_K|q4_K M REPS\n", argv[0]);
        return 1;
    }
    const std::string tn = argv[1];
    const int64_t k = 2048, m = atoll(argv[2]);
    const int reps = atoi(argv[3]);
    const int type = tn == "q6_K" ? GGML_TYPE_Q6_K : tn == "q5_K" ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
    const size_t bsz = type == GGML_TYPE_Q6_K ? sizeof(block_q6_K) : type == GGML_TYPE_Q5_K ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const size_t rs = bsz * (k / QK_K);

    // random quants and scales, block scales (fp16) of a sane size: d (and dmin) first in
    // Q4_K/Q5_K blocks, d last in Q6_K blocks
    std::mt19937 rng(1);
    std::vector<char> w(rs * m);
    for (auto & c : w) c = (char) rng();
    for (int64_t b = 0; b < m * (k / QK_K); ++b) {
        char * p = w.data() + b * bsz;
        const uint16_t d = 0x1400 + (rng() & 0xff), dmin = 0x1000 + (rng() & 0xff);
        if (type == GGML_TYPE_Q6_K) {
            memcpy(p + bsz - 2, &d, 2);
        } else {
            memcpy(p, &d, 2);
            memcpy(p + 2, &dmin, 2);
        }
    }
    std::vector<block_q8_K> xb(8 * (k / QK_K));
    for (auto & b : xb) {
        for (int i = 0; i < QK_K; ++i) b.qs[i] = (int8_t) (rng() % 255 - 127);
        for (int s = 0; s < QK_K / 16; ++s) {
            int t = 0;
            for (int i = 0; i < 16; ++i) t += b.qs[16 * s + i];
            b.bsums[s] = (int16_t) t;
        }
        b.d = 0.01f;
    }
    const char * x[8];
    std::vector<float> out(8 * m);
    float * y[8];
    for (int j = 0; j < 8; ++j) {
        x[j] = (const char *) &xb[j * (k / QK_K)];
        y[j] = &out[j * m];
    }

#define X(fn, name) fn,
    const tiles_fn fns[] = { VARIANTS };
#undef X
#define X(fn, name) name,
    const char * names[] = { VARIANTS };
#undef X
    const int nv = (int) (sizeof(fns) / sizeof(fns[0]));
    const int ns[4] = { 1, 2, 4, 8 };
    std::vector<std::vector<double>> t(nv * 4);
    std::vector<uint64_t> hash(nv * 4);
    for (int r = 0; r < reps; ++r) {
        for (int ni = 0; ni < 4; ++ni) {
            for (int v = 0; v < nv; ++v) {
                const auto t0 = std::chrono::steady_clock::now();
                fns[v](type, k, w.data(), rs, m, ns[ni], x, y);
                const auto t1 = std::chrono::steady_clock::now();
                t[v * 4 + ni].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
                uint64_t h = 1469598103934665603ull;   // FNV-1a over the bits of every output
                for (int64_t i = 0; i < ns[ni] * m; ++i) {
                    uint32_t u;
                    memcpy(&u, &out[i], 4);
                    h = (h ^ u) * 1099511628211ull;
                }
                hash[v * 4 + ni] = h;
            }
        }
    }
    for (int v = 0; v < nv; ++v) {
        printf("%s %-10s", tn.c_str(), names[v]);
        double m1 = 0;
        for (int ni = 0; ni < 4; ++ni) {
            auto & a = t[v * 4 + ni];
            std::sort(a.begin(), a.end());
            const double med = a[a.size() / 2];
            if (ni == 0) m1 = med;
            printf("  n=%d %6.2f/%5.2f (%.2fx)%s", ns[ni], med, a[0], med / m1, hash[v * 4 + ni] == hash[ni] ? "" : " BITS!");
        }
        printf("\n");
    }
    return 0;
}
