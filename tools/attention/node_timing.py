# ruff: noqa: E501
"""Per-op time of a decode, split into work, barrier waits and stalls (issue #28): a profiling aid.

    python tools/attention/node_timing.py LLAMA/ggml/src/ggml-cpu/ggml-cpu.c   # edits it in place
    cmake --build build-x && cp build-x/libpymtp.so /tmp/prof/   # then restore the file (git checkout)
    NODE_TIMING=1 PYMTP_LIBRARY=/tmp/prof/libpymtp.so python tools/profile_batch_decode.py \\
        --type F16 --rows 4 --position 2000 --decodes 150 --threads 2

Never a patch: it adds rdtsc stamps to ggml_graph_compute_thread (x86, OpenMP builds) and, at
exit, prints per op type, over the graphs of at most 8 query rows (mean of the threads, us per
graph): busy (the op's own work), in-op-bar (waits under 50 us at barriers inside the op),
imbalance (waits under 50 us for the last thread to finish the op), barrier (leaving the op's
closing barrier) and stalls (any wait of 50 us or more: a thread that lost its CPU to another
process, which profile_batch_decode's schedstat lines confirm). The 50 us threshold assumes a
2.596 GHz tsc (this machine's); the printed times use the measured rate.
"""

import argparse
import sys
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("path", type=Path, help="ggml/src/ggml-cpu/ggml-cpu.c of a llama.cpp tree")
a = ap.parse_args()
s = a.path.read_text()
if "nt_collect" in s:
    sys.exit(f"{a.path} is already instrumented")

old = "void ggml_barrier(struct ggml_threadpool * tp) {\n"
new = r"""// TEMPORARY per-node timing (tools/attention/node_timing.py): for a profiling build only
#include <x86intrin.h>
#define NT_MAXN 8192
#define NT_MAXT 4
static int nt_on = -1;
static uint64_t nt_end[NT_MAXT][NT_MAXN], nt_after[NT_MAXT][NT_MAXN], nt_start[NT_MAXT][NT_MAXN], nt_inner[NT_MAXT][NT_MAXN];
static _Thread_local uint64_t nt_bar_cycles, nt_stall_cycles;
#define NT_STALL (50*2596)   /* cycles: a wait longer than 50 us is a thread off its CPU */
#define NT_OPS 128
static double nt_busy[NT_OPS], nt_innerw[NT_OPS], nt_imb[NT_OPS], nt_ovh[NT_OPS], nt_stall[NT_OPS];
static uint64_t nt_istall[NT_MAXT][NT_MAXN];
static long nt_count[NT_OPS];
static long nt_graphs;
static double nt_wall;
static void nt_dump(void) {
    double tot = 0; uint64_t t0 = __rdtsc(); struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
    do { clock_gettime(CLOCK_MONOTONIC, &b); } while ((b.tv_sec - a.tv_sec)*1e9 + (b.tv_nsec - a.tv_nsec) < 2e7);
    const double ghz = (__rdtsc() - t0) / ((b.tv_sec - a.tv_sec)*1e9 + (b.tv_nsec - a.tv_nsec));
    if (!nt_graphs) return;
    for (int o = 0; o < NT_OPS; ++o) tot += nt_busy[o] + nt_innerw[o] + nt_imb[o] + nt_ovh[o] + nt_stall[o];
    const double f = 1e-3 / ghz / nt_graphs;
    fprintf(stderr, "node-timing decode graphs %ld, tsc %.3f GHz, graph wall %.1f us; per graph, us per thread (mean of threads):\n", nt_graphs, ghz, nt_wall*f);
    fprintf(stderr, "node-timing %-16s %6s %9s %9s %9s %9s %9s %7s\n", "op", "nodes", "busy", "in-op-bar", "imbalance", "barrier", "stalls", "share");
    for (int o = 0; o < NT_OPS; ++o) {
        if (!nt_count[o]) continue;
        fprintf(stderr, "node-timing %-16s %6.0f %9.1f %9.1f %9.1f %9.1f %9.1f %6.1f%%\n", ggml_op_name((enum ggml_op) o), (double) nt_count[o] / nt_graphs,
                nt_busy[o]*f, nt_innerw[o]*f, nt_imb[o]*f, nt_ovh[o]*f, nt_stall[o]*f,
                100*(nt_busy[o] + nt_innerw[o] + nt_imb[o] + nt_ovh[o] + nt_stall[o])/tot);
    }
    double bu = 0, iw = 0, im = 0, ov = 0, st = 0;
    for (int o = 0; o < NT_OPS; ++o) { bu += nt_busy[o]; iw += nt_innerw[o]; im += nt_imb[o]; ov += nt_ovh[o]; st += nt_stall[o]; }
    fprintf(stderr, "node-timing %-16s %6s %9.1f %9.1f %9.1f %9.1f %9.1f\n", "total", "", bu*f, iw*f, im*f, ov*f, st*f);
}
static void nt_collect(const struct ggml_cgraph * g, int nth, uint64_t wall) {
    if (nth < 2 || nth > NT_MAXT || g->n_nodes > NT_MAXN) return;
    bool decode = true;   // only graphs of at most 8 query rows (not the prompt's)
    for (int n = 0; n < g->n_nodes; ++n) {
        if (g->nodes[n]->op == GGML_OP_FLASH_ATTN_EXT && g->nodes[n]->src[0]->ne[1] > 8) decode = false;
    }
    if (decode) { nt_graphs++; nt_wall += (double) wall; }
    for (int n = 0; n < g->n_nodes; ++n) {
        if (nt_start[0][n] == 0) continue;
        const int o = g->nodes[n]->op;
        uint64_t mx = 0;
        for (int t = 0; t < nth; ++t) if (nt_end[t][n] > mx) mx = nt_end[t][n];
        if (decode) {
            for (int t = 0; t < nth; ++t) {
                nt_busy[o]   += (double) (nt_end[t][n] - nt_start[t][n] - nt_inner[t][n] - nt_istall[t][n]) / nth;
                nt_innerw[o] += (double) nt_inner[t][n] / nth;
                nt_stall[o]  += (double) nt_istall[t][n] / nth;
                const uint64_t im = mx - nt_end[t][n];
                if (im < NT_STALL) nt_imb[o] += (double) im / nth; else nt_stall[o] += (double) im / nth;
                if (nt_after[t][n]) {
                    const uint64_t ov = nt_after[t][n] - mx;
                    if (ov < NT_STALL) nt_ovh[o] += (double) ov / nth; else nt_stall[o] += (double) ov / nth;
                }
            }
            nt_count[o]++;
        }
        for (int t = 0; t < nth; ++t) { nt_start[t][n] = nt_end[t][n] = nt_after[t][n] = nt_inner[t][n] = nt_istall[t][n] = 0; }
    }
}

void ggml_barrier(struct ggml_threadpool * tp) {
    const uint64_t nt_b0 = __rdtsc();
"""
assert old in s
s = s.replace(old, new, 1)
old = """#ifdef GGML_USE_OPENMP
    #pragma omp barrier
#else
    int n_passed"""
new = """#ifdef GGML_USE_OPENMP
    #pragma omp barrier
    { const uint64_t w = __rdtsc() - nt_b0; if (w < NT_STALL) nt_bar_cycles += w; else nt_stall_cycles += w; }
#else
    int n_passed"""
assert old in s
s = s.replace(old, new, 1)
old = """        const int n_fused = ggml_cpu_try_fuse_ops(cgraph, node_n, &params, cplan);
        if (n_fused > 0) {
            node_n += n_fused;
        } else {
            ggml_compute_forward(&params, node);
        }
"""
new = """        const int nt_n = node_n;
        const uint64_t nt_bc = nt_bar_cycles, nt_sc = nt_stall_cycles;
        const uint64_t nt_t0 = __rdtsc();
        const int n_fused = ggml_cpu_try_fuse_ops(cgraph, node_n, &params, cplan);
        if (n_fused > 0) {
            node_n += n_fused;
        } else {
            ggml_compute_forward(&params, node);
        }
        const int nt_rec = nt_on > 0 && params.ith < NT_MAXT && nt_n < NT_MAXN;
        if (nt_rec) {
            nt_end[params.ith][nt_n]   = __rdtsc();
            nt_start[params.ith][nt_n] = nt_t0;
            nt_inner[params.ith][nt_n] = nt_bar_cycles - nt_bc;
            nt_istall[params.ith][nt_n] = nt_stall_cycles - nt_sc;
        }
"""
assert old in s
s = s.replace(old, new, 1)
old = """        if (node_n + 1 < cgraph->n_nodes) {
            ggml_barrier(state->threadpool);
        }
    }
"""
new = """        if (node_n + 1 < cgraph->n_nodes) {
            ggml_barrier(state->threadpool);
            if (nt_rec) {
                nt_after[params.ith][nt_n] = __rdtsc();
            }
        }
    }
"""
assert old in s
s = s.replace(old, new, 1)
old = """#ifdef GGML_USE_OPENMP
    if (n_threads > 1) {
        #pragma omp parallel num_threads(n_threads)"""
new = """    if (nt_on < 0) {
        nt_on = getenv("NODE_TIMING") != NULL;
        if (nt_on) atexit(nt_dump);
    }
    const uint64_t nt_w0 = __rdtsc();
#ifdef GGML_USE_OPENMP
    if (n_threads > 1) {
        #pragma omp parallel num_threads(n_threads)"""
assert old in s
s = s.replace(old, new, 1)
old = """            ggml_graph_compute_thread(&threadpool->workers[ith]);
        }
    } else {"""
new = """            ggml_graph_compute_thread(&threadpool->workers[ith]);
        }
        if (nt_on > 0) nt_collect(cgraph, n_threads, __rdtsc() - nt_w0);
    } else {"""
assert old in s
s = s.replace(old, new, 1)

a.path.write_text(s)
