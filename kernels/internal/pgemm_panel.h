/* What pgemm.c shares with the other kernel sources (conv_gemm.c, conv_pair.c): the
 * packed-panel width, the task grain, the epilogue as the inner kernel reads it, and the inner
 * kernel for this CPU. Internal: not cdef. */
#ifndef RELVM_INTERNAL_PGEMM_PANEL_H
#define RELVM_INTERNAL_PGEMM_PANEL_H
#include <stdint.h>

/* Columns per packed panel of B: a multiple of every ISA's tile width. */
#define PG_PANEL 32

/* Multiply-adds per task below which another thread costs more than it saves. */
#define PG_GRAIN_FMAS (1 << 15)

struct pg_epilogue {
    const float *row_bias; /* one per row of C (indexed by absolute row), or NULL */
    const float *col_bias; /* one per column of C, or NULL; never both */
    int clamp;      /* each value clamped to [lo, hi] (relvm_pgemm's clamp), or not */
    float lo, hi;
    /* With row_sums, C is not stored (pass NULL for it): each row's sum over the tile's
     * columns is added to row_sums[row] (indexed by absolute row), for a mean taken over a
     * conv's output pixels. */
    float *row_sums;
    /* Floats from the packed panel to the next one (panels of constant weights lie one after
     * another), or (a panel read in place, pg_ipanel_fn) from each of its rows to the same row
     * of the panel computed next, whose rows the inner kernel prefetches while this one
     * computes; 0: none. */
    int64_t next_panel;
};

/* C rows [0, m) x `cols` (<= PG_PANEL) columns = epilogue(A x panel), where the panel is k x
 * PG_PANEL packed floats (64-byte aligned) and C's top-left corner is at (row0, col0) of the
 * whole product (for indexing the biases). A is m x k, row-major with stride lda, or, when lda
 * is PG_A_PACKED, packed by relvm_pgemm_pack_rows (which pays when A serves several panels). */
#define PG_A_PACKED (-1)
typedef void pg_panel_fn(int64_t m, int64_t k, const float *a, int64_t lda, const float *panel,
                         float *c, int64_t ldc, int64_t cols, const struct pg_epilogue *e,
                         int64_t row0, int64_t col0);

/* Rows in the next of `blocks` balanced row blocks when `left` rows remain. */
static inline int64_t pg_block_rows(int64_t left, int64_t blocks) {
    return (left + blocks - 1) / blocks;
}

/* The same, with the panel not packed: vector v (of PG_PANEL / vector width) of B's row p is
 * read, unaligned, at bases[v] + off[p]; and A (m x k) packed by relvm_pgemm_pack_rows, so
 * each k step's broadcasts read consecutive floats (lda is unused). */
typedef void pg_ipanel_fn(int64_t m, int64_t k, const float *a, int64_t lda,
                          const float *const *bases, const int64_t *off, float *c, int64_t ldc,
                          int64_t cols, const struct pg_epilogue *e, int64_t row0, int64_t col0);

/* The same with A read in place and B a packed panel: A's element (r, p) is a[off[p] + r]
 * (a conv's direct form, conv_gemm.c: m consecutive output pixels of a row, k taps). k is one
 * block of the whole product's k when `part` says so (1 first, 2 middle, 3 last; 0 all of it):
 * blocks but the first add to the sums in C, blocks but the last leave their sums there, and
 * only the last applies the epilogue. C is stored (no row sums). */
typedef void pg_apanel_fn(int64_t m, int64_t k, const float *a, const int64_t *off,
                          const float *panel, float *c, int64_t ldc, int64_t cols,
                          const struct pg_epilogue *e, int64_t row0, int64_t col0, int part);

/* The same with A read in place, row-major with stride lda (element (r, p) at a[r * lda + p]:
 * an NHWC conv's output pixels, each reading its taps' channels as one run, conv_nhwc.c), B a
 * packed panel and k split by `part` as for pg_apanel_fn. */
typedef void pg_rpanel_fn(int64_t m, int64_t k, const float *a, int64_t lda, const float *panel,
                          float *c, int64_t ldc, int64_t cols, const struct pg_epilogue *e,
                          int64_t row0, int64_t col0, int part);

/* The inner kernel for the best instruction set this CPU has. */
pg_panel_fn *relvm_pgemm_panel_kernel(void);
/* Rows per register tile of that kernel (relvm_pgemm_pack_rows blocks A by it). */
int relvm_pgemm_tile_rows(void);
/* Its indirect form, and (in *width) how many floats each of its vectors holds. */
pg_ipanel_fn *relvm_pgemm_ipanel_kernel(int *width);
/* Its form with A in place. */
pg_apanel_fn *relvm_pgemm_apanel_kernel(void);
/* Its form with A in place, row-major. */
pg_rpanel_fn *relvm_pgemm_rpanel_kernel(void);
/* A (m x k, row stride lda) as the indirect kernel reads it, into `out` (m * k floats): block
 * by block of the kernel's row blocks, k columns of the block's rows each. */
void relvm_pgemm_pack_rows(int64_t m, int64_t k, const float *a, int64_t lda, float *out);
/* The same for the m x k matrix whose column r is A's column r, A stored k x (row stride lda):
 * row r of the matrix is a[r], a[lda + r], ... (a transposed operand, a pointwise conv's
 * channel planes). */
void relvm_pgemm_pack_columns(int64_t m, int64_t k, const float *a, int64_t lda, float *out);
#endif
