// Times one CPU flash attention op of a decode: n query rows at a cache of P cells.
// Built twice by tools/measure_attention.py (stock ggml, patched ggml) and run interleaved.
// usage: fa_bench HEADS HEADS_KV D P N THREADS REPS [LAYERS] -> prints "median_us min_us" of one op
// With LAYERS > 1 the graph holds that many ops, each with K/V of its own, as a decode's layers
// do: the cells then come from memory, not from the cache the previous repeat filled. K and V
// are laid out as in llama.cpp's cache (cells HKV*D values apart), since 2026-11-28 (K7).
#include "ggml.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

int main(int argc, char ** argv) {
    if (argc != 8 && argc != 9) {
        fprintf(stderr, "usage: %s HEADS HEADS_KV D P N THREADS REPS [LAYERS]\n", argv[0]);
        return 2;
    }
    const int64_t H = atoll(argv[1]), HKV = atoll(argv[2]), D = atoll(argv[3]);
    const int64_t P = atoll(argv[4]), N = atoll(argv[5]);
    const int nth = atoi(argv[6]), reps = atoi(argv[7]);
    const int layers = argc == 9 ? atoi(argv[8]) : 1;
    const int64_t n_kv = (P + N + 255) / 256 * 256;   // llama.cpp pads the view to 256 cells

    ggml_init_params ip = { (size_t) (64 + 2*layers*ggml_row_size(GGML_TYPE_F16, D*n_kv*HKV)/(1024*1024) + 8)*1024*1024,
                            nullptr, false };
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * q    = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, N, H, 1);
    ggml_tensor * mask = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, n_kv, N, 1, 1);

    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    for (int64_t i = 0; i < ggml_nelements(q); ++i) ((float *) q->data)[i] = nd(rng);
    for (int64_t r = 0; r < N; ++r) {
        for (int64_t c = 0; c < n_kv; ++c) {
            ((ggml_fp16_t *) mask->data)[r*n_kv + c] = ggml_fp32_to_fp16(c <= P + r ? 0.0f : -INFINITY);
        }
    }
    ggml_cgraph * gf = ggml_new_graph(ctx);
    for (int l = 0; l < layers; ++l) {
        // as llama.cpp's KV cache holds them: a cell's heads side by side, the op reading a view
        // [D, n_kv, HKV] whose cells sit HKV*D values apart
        ggml_tensor * kc = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, D, HKV, n_kv, 1);
        ggml_tensor * vc = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, D, HKV, n_kv, 1);
        for (int64_t i = 0; i < ggml_nelements(kc); ++i) ((ggml_fp16_t *) kc->data)[i] = ggml_fp32_to_fp16(nd(rng));
        for (int64_t i = 0; i < ggml_nelements(vc); ++i) ((ggml_fp16_t *) vc->data)[i] = ggml_fp32_to_fp16(nd(rng));
        ggml_tensor * k = ggml_permute(ctx, kc, 0, 2, 1, 3);
        ggml_tensor * v = ggml_permute(ctx, vc, 0, 2, 1, 3);
        ggml_build_forward_expand(gf, ggml_flash_attn_ext(ctx, q, k, v, mask, 1.0f/sqrtf((float) D), 0.0f, 0.0f));
    }

    ggml_threadpool_params tpp = ggml_threadpool_params_default(nth);
    ggml_threadpool * tp = ggml_threadpool_new(&tpp);
    ggml_cplan plan = ggml_graph_plan(gf, nth, tp);
    std::vector<uint8_t> work(plan.work_size + 1);
    plan.work_data = work.data();

    std::vector<double> us;
    for (int i = 0; i < reps + 3; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        ggml_graph_compute(gf, &plan);
        const auto t1 = std::chrono::steady_clock::now();
        if (i >= 3) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / layers);
    }
    std::sort(us.begin(), us.end());
    printf("%.2f %.2f\n", us[us.size()/2], us[0]);
    ggml_threadpool_free(tp);
    ggml_free(ctx);
    return 0;
}
