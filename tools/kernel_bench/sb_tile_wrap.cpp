// One copy of small-batch.cpp (SB_SRC), its kernels exported as WRAP(type, k, w, nb01, rows, n, x, y):
// rows_tiled over weight rows [0, rows) with n activation rows. Compiled once per copy for
// bench_tile_variants.cpp (see there); the copy's extern "C" functions are renamed on the command
// line so that several copies link into one program.
#include SB_SRC

extern "C" void WRAP(int type, int64_t k, const char * w, size_t nb01, int64_t nrows, int n,
                     const char * const * x, float * const * y) {
    const kernel_set * ks = kernels_for((ggml_type) type);
    rows_tiled(*ks, k, w, nb01, 0, nrows, n, x, y);
}
