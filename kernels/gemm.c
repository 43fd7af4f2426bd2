/* Matrix products: relvm's own GEMM (pgemm.c) for float32 matrices, BLAS for float64 and for
 * matrix-vector products, a plain int64-accumulating loop for integers (rare in inference
 * graphs; exact wrapping matters more than speed there). */
#include "relvm_config.h"
#include "blas.h"
#include "gemm.h"
#include "pgemm.h"
#include "internal/types.h"
#include "threads.h"

static int is_int(int dtype) {
    switch (dtype) {
    case RELVM_INT64: case RELVM_INT32: case RELVM_INT8: case RELVM_UINT8: case RELVM_INT16:
    case RELVM_UINT16: case RELVM_UINT32: case RELVM_UINT64:
        return 1;
    default: return 0;
    }
}

struct int_gemm {
    int dtype, out_dtype, trans_a, trans_b;
    int64_t m, n, k, stride_a, stride_b;
    const char *a, *b;
    char *c;
};

/* An element as uint64_t: modulo 2^64, which is all the wrapping product needs. is_int has
 * checked the dtype. */
static inline uint64_t load_int(int dtype, const char *base, int64_t i) {
    switch (dtype) {
    case RELVM_INT64: return (uint64_t)((const i64 *)base)[i];
    case RELVM_INT32: return (uint64_t)((const i32 *)base)[i];
    case RELVM_INT8: return (uint64_t)((const i8 *)base)[i];
    case RELVM_INT16: return (uint64_t)((const i16 *)base)[i];
    case RELVM_UINT16: return ((const u16 *)base)[i];
    case RELVM_UINT32: return ((const u32 *)base)[i];
    case RELVM_UINT64: return ((const u64 *)base)[i];
    case RELVM_UINT8: return ((const u8 *)base)[i];
    default: return 0;
    }
}

static void store_int(int dtype, char *base, int64_t i, uint64_t v) {
    switch (dtype) { /* narrowing wraps, as the int64 reference cast to out_dtype does */
    case RELVM_INT64: ((i64 *)base)[i] = (i64)v; break;
    case RELVM_INT32: ((i32 *)base)[i] = (i32)v; break;
    case RELVM_INT8: ((i8 *)base)[i] = (i8)v; break;
    case RELVM_INT16: ((i16 *)base)[i] = (i16)v; break;
    case RELVM_UINT16: ((u16 *)base)[i] = (u16)v; break;
    case RELVM_UINT32: ((u32 *)base)[i] = (u32)v; break;
    case RELVM_UINT64: ((u64 *)base)[i] = v; break;
    case RELVM_UINT8: ((u8 *)base)[i] = (u8)v; break;
    default: break;
    }
}

/* Rows [begin, end) of all batch items' outputs, row r being item r / m, row r % m. The
 * unsigned accumulator wraps exactly as the reference's int64 sum cast to out_dtype does. */
static void int_gemm_rows(void *ctx, int64_t begin, int64_t end) {
    const struct int_gemm *g = ctx;
    const int64_t isize = relvm_itemsize[g->dtype];
    for (int64_t r = begin; r < end; ++r) {
        const int64_t item = r / g->m, i = r % g->m;
        const char *a = g->a + item * g->stride_a * isize, *b = g->b + item * g->stride_b * isize;
        for (int64_t j = 0; j < g->n; ++j) {
            uint64_t acc = 0;
            for (int64_t p = 0; p < g->k; ++p) {
                const int64_t ai = g->trans_a ? p * g->m + i : i * g->k + p;
                const int64_t bi = g->trans_b ? j * g->k + p : p * g->n + j;
                acc += load_int(g->dtype, a, ai) * load_int(g->dtype, b, bi);
            }
            store_int(g->out_dtype, g->c, r * g->n + j, acc);
        }
    }
}

static int fits_int(int64_t v) { return v >= 0 && v <= INT32_MAX; }

RELVM_EXPORT int relvm_gemm(int dtype, int out_dtype, int trans_a, int trans_b, int64_t batch,
                            int64_t m, int64_t n, int64_t k, const void *a, int64_t stride_a,
                            const void *b, int64_t stride_b, void *c) {
    if (batch <= 0 || m <= 0 || n <= 0) return RELVM_OK;
    if (k < 0 || stride_a < 0 || stride_b < 0) return RELVM_UNSUPPORTED;
    if (is_int(dtype) && is_int(out_dtype)) {
        struct int_gemm g = {dtype, out_dtype, trans_a, trans_b, m, n, k, stride_a, stride_b,
                             a, b, c};
        relvm_parallel_for(batch * m, relvm_max64(1, RELVM_GRAIN / relvm_max64(1, n * k)),
                           int_gemm_rows, &g);
        return RELVM_OK;
    }
    if (dtype != out_dtype || (dtype != RELVM_FLOAT32 && dtype != RELVM_FLOAT64))
        return RELVM_UNSUPPORTED;
    /* float32: relvm's GEMM packs each panel of B as it goes; it beat OpenBLAS on batches of
     * small products (attention's per-head products: 12x at 8x8x64) and on single ones
     * (0.35-0.8 of the time). Matrix-vector products stay with BLAS's gemv: a panel of one
     * column would be 31 zeros. */
    if (dtype == RELVM_FLOAT32 && m > 1 && n > 1)
        return relvm_pgemm_batch(trans_a, trans_b, batch, m, n, k, a, stride_a, b, stride_b, c);
    if (!relvm_blas_ready()) return RELVM_NO_BLAS;
    /* BLAS takes 32-bit dims and leading dimensions. */
    if (!fits_int(m) || !fits_int(n) || !fits_int(k)) return RELVM_TOO_LARGE;
    if (dtype == RELVM_FLOAT32)
        relvm_sgemm_batch(trans_a, trans_b, batch, m, n, k, a, stride_a, b, stride_b, c);
    else
        relvm_dgemm_batch(trans_a, trans_b, batch, m, n, k, a, stride_a, b, stride_b, c);
    return RELVM_OK;
}
