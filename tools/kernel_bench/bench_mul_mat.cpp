// One ggml matrix product, k = 2048 by M weight rows of a quantized type, with n = 1, 2, 4, 8
// rows of F32 activations (the small-batch path of native/patches/0004): median and minimum
// milliseconds over REPS runs, and a hash of the bits of every output (equal hashes: equal bits,
// e.g. between two builds of the patch). The weights are not repacked (ggml_init context).
//
//   B=build-k5b/llama.cpp/ggml/src      # a pymtp build directory
//   g++ -O2 -std=gnu++17 -I$LLAMA/ggml/include tools/kernel_bench/bench_mul_mat.cpp \
//       $B/libggml.a $B/libggml-cpu.a $B/libggml-base.a -fopenmp -o bench_mul_mat
//   ./bench_mul_mat q6_K 16384 1 15        # TYPE (q6_K, q5_K, q4_K, q8_0) M THREADS REPS
#include "ggml.h"
#include "ggml-cpu.h"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <random>
#include <string>

int main(int argc, char ** argv) {
    std::string tn = argc > 1 ? argv[1] : "q6_K";
    const int64_t k = 2048, m = argc > 2 ? atoi(argv[2]) : 16384;
    const int nth = argc > 3 ? atoi(argv[3]) : 1, reps = argc > 4 ? atoi(argv[4]) : 15;
    ggml_type type = tn == "q6_K" ? GGML_TYPE_Q6_K : tn == "q5_K" ? GGML_TYPE_Q5_K : tn == "q4_K" ? GGML_TYPE_Q4_K : GGML_TYPE_Q8_0;
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    // quantize a 256-row slab of random weights and tile it (quantizing all of m takes long)
    const int64_t slab = 256;
    std::vector<float> wf(k * slab);
    for (auto & v : wf) v = nd(rng) * 0.02f;
    const size_t rs = ggml_row_size(type, k);
    std::vector<char> q(rs * slab);
    ggml_quantize_chunk(type, wf.data(), q.data(), 0, slab, k, nullptr);

    ggml_init_params ip = { (size_t) (rs * m + 64 * 1024 * 1024), nullptr, false };
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * w = ggml_new_tensor_2d(ctx, type, k, m);
    for (int64_t r = 0; r < m; r += slab) memcpy((char *) w->data + r * rs, q.data(), rs * std::min(slab, m - r));
    double sink = 0;
    for (int n : {1, 2, 4, 8}) {
        ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, n);
        for (int64_t i = 0; i < k * n; ++i) ((float *) x->data)[i] = nd(rng);
        ggml_tensor * y = ggml_mul_mat(ctx, w, x);
        ggml_cgraph * g = ggml_new_graph(ctx);
        ggml_build_forward_expand(g, y);
        std::vector<double> t;
        for (int r = 0; r < reps; ++r) {
            auto t0 = std::chrono::steady_clock::now();
            ggml_graph_compute_with_ctx(ctx, g, nth);
            auto t1 = std::chrono::steady_clock::now();
            t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
            sink += ((float *) y->data)[0];
        }
        std::sort(t.begin(), t.end());
        // checksum of the bits of all outputs
        uint64_t h = 1469598103934665603ull;
        for (int64_t i = 0; i < m * n; ++i) { uint32_t b; memcpy(&b, (float *) y->data + i, 4); h = (h ^ b) * 1099511628211ull; }
        printf("%s n=%d %.3f ms (min %.3f) hash %016llx\n", tn.c_str(), n, t[t.size() / 2], t[0], (unsigned long long) h);
    }
    fprintf(stderr, "# %g\n", sink);
}
