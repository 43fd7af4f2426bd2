/* relvm's float32 GEMM for inference: B (the weights) packed once into 32-column panels, an
 * inner kernel that keeps a whole tile of C in registers across k, and the epilogue (bias,
 * clamp, e.g. relu) applied before the tile is stored, so a fused dense layer touches its output
 * once.
 * The inner kernel is one source (internal/pgemm_tile.h) compiled for AVX-512, AVX2+FMA and
 * SSE2; the CPU picks at run time, so the library runs on any x86-64. */
#if defined(__x86_64__)
#include <immintrin.h> /* the masked loads and stores of a panel's ragged edge */
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "relvm_config.h"
#include "pgemm.h"
#include "internal/pgemm_panel.h"
#include "internal/scratch.h"
#include "internal/transpose.h"
#include "internal/types.h"
#include "threads.h"

/* Every loop here starts on a cache line: the inner kernels otherwise ran 10% slower or faster
 * depending on where unrelated code moved them. (Only here: on the short loops elsewhere the
 * padding costs more than it saves.) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("align-loops=64")
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define PG_MULTI_ISA 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#define PG_SUFFIX avx512
#define PG_VW 16
#define PG_MR 12
#include "internal/pgemm_tile.h"
#undef PG_SUFFIX
#undef PG_VW
#undef PG_MR
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define PG_SUFFIX avx2
#define PG_VW 8
#define PG_MR 6
#include "internal/pgemm_tile.h"
#undef PG_SUFFIX
#undef PG_VW
#undef PG_MR
#pragma GCC pop_options
#endif

/* The portable kernel: SSE2 on any x86-64 (whatever the target's baseline elsewhere). */
#define PG_SUFFIX base
#define PG_VW 4
#define PG_MR 4
#include "internal/pgemm_tile.h"
#undef PG_SUFFIX
#undef PG_VW
#undef PG_MR

/* Chosen once (pthread_once: kernels may run on several threads from their first call). */
static pthread_once_t choose_once = PTHREAD_ONCE_INIT;
static pg_panel_fn *chosen;
static pg_ipanel_fn *chosen_indirect;
static pg_apanel_fn *chosen_in_place;
static pg_rpanel_fn *chosen_rows_in_place;
static int chosen_width, chosen_rows;
static const char *chosen_isa = "sse2";

/* The best kernel this CPU runs; RELVM_PGEMM_ISA=avx2|sse2 asks for a lesser one (tests run
 * every kernel on one machine that way). */
static void choose(void) {
    pg_panel_fn *fn = panel_base;
    pg_ipanel_fn *indirect = ipanel_base;
    pg_apanel_fn *in_place = apanel_base;
    pg_rpanel_fn *rows_in_place = rpanel_base;
    int width = 4, rows = tile_rows_base;
#ifdef PG_MULTI_ISA
    const char *cap = getenv("RELVM_PGEMM_ISA");
    const int upto = !cap ? 2 : strcmp(cap, "avx2") == 0 ? 1 : strcmp(cap, "sse2") == 0 ? 0 : 2;
    __builtin_cpu_init();
    if (upto >= 2 && __builtin_cpu_supports("avx512f")) {
        fn = panel_avx512;
        indirect = ipanel_avx512;
        in_place = apanel_avx512;
        rows_in_place = rpanel_avx512;
        width = 16;
        rows = tile_rows_avx512;
        chosen_isa = "avx512f";
    } else if (upto >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        fn = panel_avx2;
        indirect = ipanel_avx2;
        in_place = apanel_avx2;
        rows_in_place = rpanel_avx2;
        width = 8;
        rows = tile_rows_avx2;
        chosen_isa = "avx2";
    }
#endif
    chosen = fn;
    chosen_indirect = indirect;
    chosen_in_place = in_place;
    chosen_rows_in_place = rows_in_place;
    chosen_width = width;
    chosen_rows = rows;
}

pg_panel_fn *relvm_pgemm_panel_kernel(void) {
    pthread_once(&choose_once, choose);
    return chosen;
}

pg_ipanel_fn *relvm_pgemm_ipanel_kernel(int *width) {
    relvm_pgemm_panel_kernel();
    *width = chosen_width;
    return chosen_indirect;
}

pg_apanel_fn *relvm_pgemm_apanel_kernel(void) {
    relvm_pgemm_panel_kernel();
    return chosen_in_place;
}

pg_rpanel_fn *relvm_pgemm_rpanel_kernel(void) {
    relvm_pgemm_panel_kernel();
    return chosen_rows_in_place;
}

int relvm_pgemm_tile_rows(void) {
    relvm_pgemm_panel_kernel();
    return chosen_rows;
}

void relvm_pgemm_pack_rows(int64_t m, int64_t k, const float *a, int64_t lda, float *out) {
    relvm_pgemm_panel_kernel();
    const int64_t blocks = (m + chosen_rows - 1) / chosen_rows;
    for (int64_t blk = 0, r0 = 0; blk < blocks; ++blk) {
        const int64_t rows = pg_block_rows(m - r0, blocks - blk);
        /* a block is its rows transposed: 8 x 8 blocks in vectors (a loop reading one float of
         * each row per k step cost a tenth of a transformer's dense layers on two threads) */
        relvm_transpose_f32(rows, k, a + r0 * lda, lda, out, rows);
        out += rows * k;
        r0 += rows;
    }
}

void relvm_pgemm_pack_columns(int64_t m, int64_t k, const float *a, int64_t lda, float *out) {
    relvm_pgemm_panel_kernel();
    const int64_t blocks = (m + chosen_rows - 1) / chosen_rows;
    for (int64_t blk = 0, r0 = 0; blk < blocks; ++blk) {
        const int64_t rows = pg_block_rows(m - r0, blocks - blk);
        for (int64_t p = 0; p < k; ++p, out += rows) /* a run of A's row p */
            for (int64_t r = 0; r < rows; ++r) out[r] = a[p * lda + r0 + r];
        r0 += rows;
    }
}

RELVM_EXPORT const char *relvm_pgemm_isa(void) {
    relvm_pgemm_panel_kernel();
    return chosen_isa;
}

RELVM_EXPORT int64_t relvm_pgemm_packed_size(int64_t k, int64_t n) {
    return (n + PG_PANEL - 1) / PG_PANEL * PG_PANEL * k;
}

RELVM_EXPORT void relvm_pgemm_pack(int trans_b, int64_t k, int64_t n, const void *b_,
                                   void *packed_) {
    const float *b = b_;
    float *packed = packed_;
    for (int64_t q = 0; q * PG_PANEL < n; ++q) {
        float *panel = packed + q * k * PG_PANEL;
        for (int64_t j = 0; j < PG_PANEL; ++j) {
            const int64_t col = q * PG_PANEL + j;
            if (col >= n) {
                for (int64_t p = 0; p < k; ++p) panel[p * PG_PANEL + j] = 0.0f;
            } else if (trans_b) { /* b is n x k: column `col` of op(b) is row `col` of b */
                const float *src = b + col * k;
                for (int64_t p = 0; p < k; ++p) panel[p * PG_PANEL + j] = src[p];
            } else {
                for (int64_t p = 0; p < k; ++p) panel[p * PG_PANEL + j] = b[p * n + col];
            }
        }
    }
}

/* Floats of A a thread packs at most (its rows of A, reused by every panel): larger, A is read
 * as it is, rather than keep a scratch buffer that large for the life of the thread. */
#define PG_PACKED_A_FLOATS (1 << 19)

/* Rows of A a task covers at most, and floats of them: a tall A is taken in chunks, each packed
 * once and run against every panel of B while it is in L2 (an LSTM's input projection, 3200 x
 * 1024 x 256, ran at 51 GFMA/s reading all of A per panel, 66 in chunks of 192 rows). Chunks
 * of more rows cost again: each panel then writes C rows on more pages than the TLB holds.
 * Each chunk reads all of B, so a B much larger than A (weights from memory) is not worth it:
 * A is then read once per panel, from L2 or L3. */
#define PG_CHUNK_ROWS 384
#define PG_CHUNK_A_FLOATS (1 << 17)

/* What this thread's scratch holds, packed for a call: A's rows from r0 of batch item `item`
 * (relvm_pgemm_pack_rows), and (relvm_pgemm_batch) panel q of item `b_item`'s B. The pool hands
 * a thread its tasks in several runs (one function call each, as few as one task per run on
 * two threads), so what a run packed is kept for the next run of the same call; `call` numbers
 * the calls, so nothing packed for an earlier one is taken for this one. */
static _Atomic uint64_t pg_calls;
static _Thread_local struct {
    uint64_t call;
    const float *scratch;
    int64_t item, r0, b_item, q;
} packed_for;

/* Whether this thread's scratch (at `scratch`) holds what call `call` packed for (item, r0) of
 * A; if not, it will once the caller has packed it. */
static int a_is_packed(uint64_t call, const float *scratch, int64_t item, int64_t r0) {
    if (packed_for.call != call || packed_for.scratch != scratch) {
        packed_for.call = call;
        packed_for.scratch = scratch;
        packed_for.item = packed_for.r0 = packed_for.b_item = packed_for.q = -1;
    }
    const int held = packed_for.item == item && packed_for.r0 == r0;
    packed_for.item = item;
    packed_for.r0 = r0;
    return held;
}

/* The same for panel q of item b_item's B (after a_is_packed for this call and scratch). */
static int b_is_packed(int64_t b_item, int64_t q) {
    const int held = packed_for.b_item == b_item && packed_for.q == q;
    packed_for.b_item = b_item;
    packed_for.q = q;
    return held;
}

/* Task t is rows of chunk t / panels, panel t % panels: a thread's consecutive tasks share the
 * chunk of A it packed. */
struct pg_job {
    pg_panel_fn *fn;
    int pack_a; /* each thread packs its chunk of A's rows (relvm_pgemm_pack_rows) once */
    uint64_t call;
    int64_t m, n, k, lda, ldc, panels, row_chunks, chunk_rows;
    const float *a, *packed;
    float *c;
    struct pg_epilogue e;
    relvm_block_fn *post;
    void *post_ctx;
};

static void pg_tasks(void *ctx, int64_t begin, int64_t end) {
    const struct pg_job *j = ctx;
    /* This thread's copy of A's rows, packed (NULL: A read as it is). */
    float *packed_a = j->pack_a ? relvm_scratch_floats((size_t)(j->chunk_rows * j->k)) : NULL;
    for (int64_t t = begin; t < end; ++t) {
        const int64_t q = t % j->panels, r0 = t / j->panels * j->chunk_rows;
        const int64_t rows = relvm_min64(j->chunk_rows, j->m - r0);
        const int64_t col0 = q * PG_PANEL, cols = relvm_min64(PG_PANEL, j->n - col0);
        const float *a = j->a + r0 * j->lda;
        int64_t lda = j->lda;
        if (packed_a) {
            if (!a_is_packed(j->call, packed_a, 0, r0))
                relvm_pgemm_pack_rows(rows, j->k, a, lda, packed_a);
            a = packed_a;
            lda = PG_A_PACKED;
        }
        j->fn(rows, j->k, a, lda, j->packed + q * j->k * PG_PANEL, j->c + r0 * j->ldc + col0,
              j->ldc, cols, &j->e, r0, col0);
        if (j->post) j->post(j->post_ctx, r0 * j->ldc + col0, rows, cols, j->ldc);
    }
}

RELVM_EXPORT int relvm_pgemm(int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                             const void *packed, void *c, int64_t ldc, const void *bias,
                             int bias_per_row, const float *clamp, relvm_block_fn *post,
                             void *post_ctx) {
    if (m < 0 || n < 0 || k < 0 || lda < 0 || ldc < 0) return RELVM_UNSUPPORTED;
    if (m == 0 || n == 0) return RELVM_OK;
    struct pg_job j = {relvm_pgemm_panel_kernel(), 0, atomic_fetch_add(&pg_calls, 1) + 1, m, n,
                       k, lda, ldc, 0, 1, m, a, packed, c,
                       {bias_per_row ? bias : NULL, bias_per_row ? NULL : bias, clamp != NULL,
                        clamp ? clamp[0] : 0.0f, clamp ? clamp[1] : 0.0f, NULL,
                        k * PG_PANEL},
                       post, post_ctx};
    /* Panels are the natural tasks (each streams its slice of B once); with fewer panels than
     * two per thread, rows are split too, in chunks of at least one tile of the chosen kernel
     * (chosen_rows, set by relvm_pgemm_panel_kernel above); and a tall A is split into chunks
     * of whole tiles that stay in L2 (PG_CHUNK_ROWS). */
    const int64_t panels = (n + PG_PANEL - 1) / PG_PANEL, threads = relvm_threads_get();
    const int64_t tile = chosen_rows;
    const int64_t cap = relvm_max64(
        tile, relvm_min64(PG_CHUNK_ROWS, PG_CHUNK_A_FLOATS / relvm_max64(k, 1)) / tile * tile);
    j.panels = panels;
    if (panels < 2 * threads && m > tile) {
        const int64_t want = (2 * threads + panels - 1) / panels;
        j.row_chunks = relvm_min64(want, (m + tile - 1) / tile);
        j.chunk_rows = (m + j.row_chunks - 1) / j.row_chunks;
        j.row_chunks = (m + j.chunk_rows - 1) / j.chunk_rows;
    }
    if (j.chunk_rows > cap && n <= 4 * m) { /* (B much larger than A: read B once) */
        const int64_t chunks = (m + cap - 1) / cap, even = (m + chunks - 1) / chunks;
        j.chunk_rows = (even + tile - 1) / tile * tile;
        j.row_chunks = (m + j.chunk_rows - 1) / j.chunk_rows;
    }
    j.pack_a = m > 2 && j.chunk_rows * k <= PG_PACKED_A_FLOATS;
    const int64_t fmas = relvm_max64(1, j.chunk_rows * PG_PANEL * relvm_max64(k, 1));
    relvm_parallel_for(panels * j.row_chunks, relvm_max64(1, PG_GRAIN_FMAS / fmas), pg_tasks,
                       &j);
    return RELVM_OK;
}

/* --- batches of products whose B is not packed ahead (attention's Q K^T and P V) ----------- */

/* Task t is batch item t / (panels * row_chunks), then panel, then row chunk, so consecutive
 * tasks of a thread share the panel of B it packed. */
struct pgb_job {
    pg_panel_fn *fn;
    int trans_a, trans_b;
    int pack_a; /* op(A)'s rows packed (pack_a_rows) by each thread, once per item */
    uint64_t call;
    int64_t m, n, k, stride_a, stride_b, panels, row_chunks, chunk_rows;
    const float *a, *b;
    float *c;
    _Atomic int failed; /* a thread could not get its scratch */
};

/* Panel q (k x PG_PANEL, zero past column n) of op(B): B is k x n, or n x k when trans_b. */
static void pack_b_panel(const float *b, int trans_b, int64_t k, int64_t n, int64_t q,
                         float *panel) {
    const int64_t col0 = q * PG_PANEL, cols = relvm_min64(PG_PANEL, n - col0);
    for (int64_t p = 0; p < k; ++p) {
        float *dst = panel + p * PG_PANEL;
        if (trans_b)
            for (int64_t j = 0; j < cols; ++j) dst[j] = b[(col0 + j) * k + p];
        else
            memcpy(dst, b + p * n + col0, (size_t)cols * sizeof(float));
        for (int64_t j = cols; j < PG_PANEL; ++j) dst[j] = 0.0f;
    }
}

/* Rows r0 .. r0 + rows of op(A) (A is m x k, or k x m when trans_a) packed as
 * relvm_pgemm_pack_rows packs them. */
static void pack_a_rows(const float *a, int trans_a, int64_t m, int64_t k, int64_t r0,
                        int64_t rows, float *out) {
    if (trans_a)
        relvm_pgemm_pack_columns(rows, k, a + r0, m, out);
    else
        relvm_pgemm_pack_rows(rows, k, a + r0 * k, k, out);
}

static void pgb_tasks(void *ctx, int64_t begin, int64_t end) {
    struct pgb_job *j = ctx;
    const int64_t k = j->k, per_item = j->panels * j->row_chunks;
    const size_t a_floats = j->pack_a ? (size_t)(j->chunk_rows * k) : 0;
    float *panel = relvm_scratch_floats((size_t)(k * PG_PANEL) + a_floats);
    if (!panel) {
        atomic_store(&j->failed, 1);
        return;
    }
    float *packed_a = panel + k * PG_PANEL; /* 64-byte aligned: k * 128 bytes in */
    const struct pg_epilogue none = {NULL, NULL, 0, 0.0f, 0.0f, NULL, 0};
    for (int64_t t = begin; t < end; ++t) {
        const int64_t item = t / per_item, rest = t % per_item;
        const int64_t q = rest / j->row_chunks, r0 = rest % j->row_chunks * j->chunk_rows;
        const int64_t rows = relvm_min64(j->chunk_rows, j->m - r0);
        const float *b = j->b + item * j->stride_b, *a = j->a + item * j->stride_a;
        /* (A's entry is kept, and checked, even when A is not packed: it names the call) */
        if (!a_is_packed(j->call, panel, item, r0) && j->pack_a)
            pack_a_rows(a, j->trans_a, j->m, k, r0, rows, packed_a);
        if (!b_is_packed(item, q)) pack_b_panel(b, j->trans_b, k, j->n, q, panel);
        const int64_t col0 = q * PG_PANEL;
        j->fn(rows, k, j->pack_a ? packed_a : a + r0 * k, j->pack_a ? PG_A_PACKED : k, panel,
              j->c + (item * j->m + r0) * j->n + col0, j->n, relvm_min64(PG_PANEL, j->n - col0),
              &none, r0, col0);
    }
}

RELVM_EXPORT int relvm_pgemm_batch(int trans_a, int trans_b, int64_t batch, int64_t m, int64_t n,
                                   int64_t k, const void *a, int64_t stride_a, const void *b,
                                   int64_t stride_b, void *c) {
    if (batch < 0 || m < 0 || n < 0 || k < 0 || stride_a < 0 || stride_b < 0)
        return RELVM_UNSUPPORTED;
    if (batch == 0 || m == 0 || n == 0) return RELVM_OK;
    const int64_t panels = (n + PG_PANEL - 1) / PG_PANEL, threads = relvm_threads_get();
    struct pgb_job j = {relvm_pgemm_panel_kernel(), trans_a, trans_b, 0,
                        atomic_fetch_add(&pg_calls, 1) + 1, m, n, k, stride_a, stride_b, panels,
                        1, m, a, b, c, 0};
    const int64_t tile = chosen_rows;
    if (batch * panels < 2 * threads && m > tile) { /* too few tasks: split rows too */
        const int64_t want = (2 * threads + batch * panels - 1) / (batch * panels);
        j.row_chunks = relvm_min64(want, (m + tile - 1) / tile);
        j.chunk_rows = (m + j.row_chunks - 1) / j.row_chunks;
        j.row_chunks = (m + j.chunk_rows - 1) / j.chunk_rows;
    }
    /* op(A) transposed is always copied (its rows are A's columns) */
    j.pack_a = trans_a || j.chunk_rows * k <= PG_PACKED_A_FLOATS;
    const int64_t fmas = relvm_max64(1, j.chunk_rows * PG_PANEL * relvm_max64(k, 1));
    relvm_parallel_for(batch * panels * j.row_chunks,
                       relvm_max64(1, PG_GRAIN_FMAS / fmas), pgb_tasks, &j);
    return atomic_load(&j.failed) ? RELVM_NO_MEMORY : RELVM_OK;
}
