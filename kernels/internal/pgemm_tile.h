/* The inner kernel of pgemm.c, written once and compiled once per instruction set: pgemm.c
 * includes this file under `#pragma GCC target(...)` with
 *   PG_SUFFIX  a name suffix (avx512, avx2, sse2),
 *   PG_VW      floats per vector register (16, 8, 4),
 *   PG_MR      rows per tile (as many as the registers hold: 2 * PG_MR accumulators).
 * A tile is PG_MR rows x (2 * PG_VW) columns of C, kept in registers over the whole k loop;
 * a 32-column panel of packed B is covered by 32 / (2 * PG_VW) tiles side by side.
 * Internal: not part of the cdef. */

#define PG_CAT2(a, b) a##_##b
#define PG_CAT(a, b) PG_CAT2(a, b)
#define PG_NAME(x) PG_CAT(x, PG_SUFFIX)
#define PG_TW (2 * PG_VW) /* tile width in columns */


typedef float PG_NAME(vec) __attribute__((vector_size(PG_VW * 4)));
typedef float PG_NAME(uvec) __attribute__((vector_size(PG_VW * 4), aligned(4)));
typedef int32_t PG_NAME(mask) __attribute__((vector_size(PG_VW * 4)));

/* x in every lane (one vbroadcastss; a lane-by-lane loop or `(vec){0} + x` compiles worse). */
static inline __attribute__((always_inline)) PG_NAME(vec) PG_NAME(splat)(float x) {
    return __builtin_shuffle((PG_NAME(vec)){x}, (PG_NAME(mask)){0});
}

/* v clamped to [lo, hi] lane by lane: lo where v < lo, then hi where v > hi (NaN compares
 * false both times and stays NaN, as in the reference; relu's lo of 0 keeps -0). */
static inline __attribute__((always_inline)) PG_NAME(vec) PG_NAME(clamped)(
    PG_NAME(vec) v, PG_NAME(vec) lo, PG_NAME(vec) hi) {
    typedef PG_NAME(mask) mask;
    const mask below = v < lo;
    v = (PG_NAME(vec))(((mask)v & ~below) | ((mask)lo & below));
    const mask above = v > hi;
    return (PG_NAME(vec))(((mask)v & ~above) | ((mask)hi & above));
}

/* The first n (0 <= n <= PG_VW) floats at p into a vector, zeros after them, and a vector's
 * first n lanes stored to p: nothing past p + n is touched (the last panel's ragged edge).
 * Masked with AVX-512 and AVX2; float by float with SSE2. */
static inline __attribute__((always_inline)) PG_NAME(vec) PG_NAME(load_part)(const float *p,
                                                                             int64_t n) {
#if PG_VW == 16
    return (PG_NAME(vec))_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);
#elif PG_VW == 8
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return (PG_NAME(vec))_mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n),
                                                                  lanes));
#else
    float tmp[PG_VW] = {0};
    for (int64_t j = 0; j < n; ++j) tmp[j] = p[j];
    return *(const PG_NAME(uvec) *)tmp;
#endif
}

static inline __attribute__((always_inline)) void PG_NAME(store_part)(float *p, PG_NAME(vec) v,
                                                                       int64_t n) {
#if PG_VW == 16
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), (__m512)v);
#elif PG_VW == 8
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), lanes), (__m256)v);
#else
    float tmp[PG_VW];
    *(PG_NAME(uvec) *)tmp = v;
    for (int64_t j = 0; j < n; ++j) p[j] = tmp[j];
#endif
}

/* The two vectors of a tile row from c's first `cols` (< PG_TW) floats, and back. */
static inline __attribute__((always_inline)) void PG_NAME(load_ragged)(
    const float *c, int64_t cols, PG_NAME(vec) *v0, PG_NAME(vec) *v1) {
    *v0 = cols >= PG_VW ? *(const PG_NAME(uvec) *)c : PG_NAME(load_part)(c, cols);
    *v1 = cols > PG_VW ? PG_NAME(load_part)(c + PG_VW, cols - PG_VW) : (PG_NAME(vec)){0};
}

static inline __attribute__((always_inline)) void PG_NAME(store_ragged)(
    float *c, int64_t cols, PG_NAME(vec) v0, PG_NAME(vec) v1) {
    if (cols >= PG_VW) {
        *(PG_NAME(uvec) *)c = v0;
        PG_NAME(store_part)(c + PG_VW, v1, cols - PG_VW);
    } else {
        PG_NAME(store_part)(c, v0, cols);
    }
}

/* Rows per tile of this instruction set (relvm_pgemm_pack_rows blocks A by it). */
static const int PG_NAME(tile_rows) = PG_MR;

/* The sum of v's lanes: adds of v and v with its halves, quarters, ... swapped (constant
 * shuffles; lane 0 ends up with the total). */
static inline __attribute__((always_inline)) float PG_NAME(lanes_sum)(PG_NAME(vec) v) {
    typedef PG_NAME(mask) mask;
#if PG_VW == 16
    v += __builtin_shuffle(v, (mask){8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7});
    v += __builtin_shuffle(v, (mask){4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11});
    v += __builtin_shuffle(v, (mask){2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13});
    v += __builtin_shuffle(v, (mask){1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14});
#elif PG_VW == 8
    v += __builtin_shuffle(v, (mask){4, 5, 6, 7, 0, 1, 2, 3});
    v += __builtin_shuffle(v, (mask){2, 3, 0, 1, 6, 7, 4, 5});
    v += __builtin_shuffle(v, (mask){1, 0, 3, 2, 5, 4, 7, 6});
#elif PG_VW == 4
    v += __builtin_shuffle(v, (mask){2, 3, 0, 1});
    v += __builtin_shuffle(v, (mask){1, 0, 3, 2});
#else
#error "lanes_sum: no shuffles for this vector width"
#endif
    return v[0];
}

/* rows x PG_TW tile at column `col` of the panel: C[r][col + j] for r < rows, j < cols.
 * B's row p is read from the packed panel (panel + p * PG_PANEL + col) or, when `indirect`
 * (a constant at each call), as two vectors at base0 + off[p] and base1 + off[p]: a conv reads
 * its input in place that way (see conv_gemm.c). A is packed by relvm_pgemm_pack_rows when
 * `apacked` is 1 (a constant too; always with `indirect`), or, when it is 2, read in place:
 * element (r, p) at a[off[p] + r] (a conv's direct form: rows are consecutive output pixels of
 * an output row, p the taps, and a the row's first pixel in the padded input).
 * `part` splits k into blocks (the caller's k is one block): 0 all of k; 1 its first block, 2 a
 * middle one, 3 the last. Blocks but the first start from the sums in C, blocks but the last
 * store their sums as they are; the epilogue runs once, after the last. */
static inline __attribute__((always_inline)) void PG_NAME(tile)(
    const int rows, const int indirect, const int apacked, int64_t k, const float *a, int64_t lda,
    const float *panel, const float *base0, const float *base1, const int64_t *off,
    int64_t col, float *c, int64_t ldc, int64_t cols, const struct pg_epilogue *e, int64_t row0,
    int64_t col0, int64_t next, const int part, const int half) {
    typedef PG_NAME(vec) vec;
    typedef PG_NAME(uvec) uvec;
    /* A's element (r, p): row-major with stride lda, or (apacked: packed by
     * relvm_pgemm_pack_rows) the block's k columns of `rows` floats each, so a k step's
     * broadcasts read consecutive floats through one pointer. Row-major, the tile holds a
     * pointer per row: 12 of them with the loop's own are more than x86-64 has registers, and
     * GCC reloaded some from the stack inside the k loop. */
#define PG_A(r, p)                                                                             \
    (apacked == 2 ? a[off[p] + (r)] : apacked ? a[(p) * rows + (r)] : a[(r) * lda + (p)])
    vec acc[PG_MR][2];
    if (part >= 2) { /* a later block of k: from the sums so far */
#pragma GCC unroll 16
        for (int r = 0; r < rows; ++r) {
            const float *cr = c + r * ldc + col;
            if (cols >= PG_TW) {
                acc[r][0] = *(const uvec *)cr;
                acc[r][1] = *(const uvec *)(cr + PG_VW);
            } else { /* the last panel's ragged edge: no further than its columns */
                PG_NAME(load_ragged)(cr, cols, &acc[r][0], &acc[r][1]);
            }
        }
    } else {
#pragma GCC unroll 16
        for (int r = 0; r < rows; ++r) acc[r][0] = acc[r][1] = (vec){0};
    }
    const float *b = panel + col;
    /* Row p of the next panel (`next` floats on; 0: none), fetched while this one computes,
     * so weights that come from memory on every call (a model larger than the caches) stream
     * behind the arithmetic instead of before it. A packed panel's row (row p of this one at
     * BP) goes to L2: it is needed only after every row block of this panel, by when L1 has
     * turned over (into L1 it evicted the panel being read: an LSTM's recurrent weights, in L2
     * every step). Read in place, the next panel's row is one run of a large image's row, each
     * k row on a page of its own: more streams than the hardware prefetchers follow, so without
     * this the first row block of every panel waited on memory (a 1x1 conv over 80 x 80 pixels
     * ran at 2/3 the speed of one over 20 x 20). Not for a packed panel under a tile of 4 rows
     * or fewer: its k loop is bound by reading B from L2, and the fetches took load slots from
     * it (an LSTM's 1 x 256 x 1024 recurrent product ran at 65 GB/s of weights with them, 110
     * without; from memory it ran as fast either way). */
#define PG_FETCH_NEXT(P, BP)                                                                   \
    do {                                                                                       \
        if (next && indirect) {                                                                \
            __builtin_prefetch(base0 + off[P] + next);                                         \
            __builtin_prefetch(base0 + off[P] + next + 16);                                    \
        } else if (next && rows > 4) {                                                         \
            __builtin_prefetch((BP) + next, 0, 1);                                             \
            __builtin_prefetch((BP) + next + 16, 0, 1);                                        \
        }                                                                                      \
    } while (0)
    /* Every tile height accumulates a row's products in the same order, one chain per
     * accumulator along k: a row's result never depends on how many rows share its call, so
     * a request run alone and the same request stacked with others by the server's dynamic
     * batcher (relvm/serving) get equal results, bit for bit. (One- and two-row tiles once
     * split k four ways to break the FMA latency chains of batch-1 dense layers: no faster on
     * AMD Zen 4 -- the MLP at batch 1 39.4 us against 38.7 without, a 1x768x3072 dense 114
     * against 116 -- and it made results depend on the batch.) */
    int64_t p = 0;
#if PG_VW == 16
    if (apacked == 0 && rows > 4) {
        /* A row-major (read in place): a pointer per row, 12 of them, is more than x86-64
         * has registers, and GCC moved them in and out of vector registers in the k loop (a
         * vmovq per broadcast, on a port the FMAs use: an NHWC conv's taps ran 1.2-1.3x
         * slower than the same GEMM on A packed). Instead, four pointers, to rows 0, 3, 6 and
         * 9, and row r at its pointer + (r % 3) * lda, in the addressing mode (asm, so the
         * compiler cannot make a pointer of each row again). */
        const int64_t ldb = lda * (int64_t)sizeof(float);
        const int groups = (rows + 2) / 3; /* the pointers this tile's rows use */
        const char *q[4];
#pragma GCC unroll 4
        for (int g = 0; g < groups; ++g) q[g] = (const char *)(a + p) + 3 * g * ldb;
        for (; p < k; ++p, b += PG_PANEL) {
            PG_FETCH_NEXT(p, b);
            const vec b0 = *(const vec *)b;
            const vec b1 = half ? (vec){0} : *(const vec *)(b + PG_VW);
#pragma GCC unroll 16
            for (int r = 0; r < rows && half; ++r) {
                /* The half tile: one multiply-add per broadcast, so the broadcast rides in
                 * the FMA's memory operand ({1to16}) instead of an instruction of its own (on
                 * AMD Zen 4 a 3x3 conv of 16 -> 16 channels over 80 x 80 took 0.75 of the
                 * time, a 16-channel RGB stem 0.8) */
                if (r % 3 == 0)
                    __asm__("vfmadd231ps (%1)%{1to16%}, %2, %0"
                            : "+v"(acc[r][0]) : "r"(q[r / 3]), "v"(b0), "m"(*q[r / 3]));
                else if (r % 3 == 1)
                    __asm__("vfmadd231ps (%1,%2,1)%{1to16%}, %3, %0"
                            : "+v"(acc[r][0]) : "r"(q[r / 3]), "r"(ldb), "v"(b0), "m"(*q[r / 3]));
                else
                    __asm__("vfmadd231ps (%1,%2,2)%{1to16%}, %3, %0"
                            : "+v"(acc[r][0]) : "r"(q[r / 3]), "r"(ldb), "v"(b0), "m"(*q[r / 3]));
            }
#pragma GCC unroll 16
            for (int r = 0; r < rows && !half; ++r) {
                /* ("m": the asm reads memory at the row's pointer, so it stays after any store
                 * there; the tile itself writes no A) */
                vec ar;
                if (r % 3 == 0)
                    __asm__("vbroadcastss (%1), %0" : "=v"(ar) : "r"(q[r / 3]), "m"(*q[r / 3]));
                else if (r % 3 == 1)
                    __asm__("vbroadcastss (%1,%2,1), %0" : "=v"(ar) : "r"(q[r / 3]), "r"(ldb),
                            "m"(*q[r / 3]));
                else
                    __asm__("vbroadcastss (%1,%2,2), %0" : "=v"(ar) : "r"(q[r / 3]), "r"(ldb),
                            "m"(*q[r / 3]));
                acc[r][0] += ar * b0;
                if (!half) acc[r][1] += ar * b1;
            }
#pragma GCC unroll 4
            for (int g = 0; g < groups; ++g) q[g] += sizeof(float);
        }
    }
#endif
    for (; p < k; ++p, b += PG_PANEL) {
        PG_FETCH_NEXT(p, b);
        const vec b0 = indirect ? *(const uvec *)(base0 + off[p]) : *(const vec *)b;
        const vec b1 = half       ? (vec){0}
                       : indirect ? *(const uvec *)(base1 + off[p])
                                  : *(const vec *)(b + PG_VW);
#pragma GCC unroll 16
        for (int r = 0; r < rows; ++r) {
            const vec ar = PG_NAME(splat)(PG_A(r, p));
            acc[r][0] += ar * b0;
            if (!half) acc[r][1] += ar * b1;
        }
    }
    if (part == 1 || part == 2) { /* not the last block of k: the sums as they are */
#pragma GCC unroll 16
        for (int r = 0; r < rows; ++r) {
            float *cr = c + r * ldc + col;
            if (cols >= PG_TW) {
                *(uvec *)cr = acc[r][0];
                *(uvec *)(cr + PG_VW) = acc[r][1];
            } else {
                PG_NAME(store_ragged)(cr, cols, acc[r][0], acc[r][1]);
            }
        }
        return;
    }
    /* The epilogue, row by row on copies: GCC keeps acc in registers only when nothing
     * after the k loop indexes it as memory (a tile spilled to the stack costs 30% on short k). */
    const float *cb = e->col_bias ? e->col_bias + col0 + col : NULL;
    float pad[PG_TW];
    if (cb && cols < PG_TW) { /* the ragged edge: read no further than the bias goes */
        for (int64_t j = 0; j < PG_TW; ++j) pad[j] = j < cols ? cb[j] : 0.0f;
        cb = pad;
    }
    const vec cb0 = cb ? *(const uvec *)cb : (vec){0};
    const vec cb1 = cb ? *(const uvec *)(cb + PG_VW) : (vec){0};
    /* e's fields in locals: stores into c could alias e, which would reload them every row. */
    const int clamp = e->clamp, whole = cols >= PG_TW;
    const vec lo = PG_NAME(splat)(e->lo), hi = PG_NAME(splat)(e->hi);
    const float *const row_bias = cb ? NULL : e->row_bias ? e->row_bias + row0 : NULL;
    float *const row_sums = e->row_sums ? e->row_sums + row0 : NULL;
#pragma GCC unroll 16
    for (int r = 0; r < rows; ++r) {
        vec v0 = acc[r][0], v1 = acc[r][1];
        if (cb) {
            v0 += cb0;
            v1 += cb1;
        } else if (row_bias) {
            const vec br = PG_NAME(splat)(row_bias[r]);
            v0 += br;
            v1 += br;
        }
        if (clamp) {
            v0 = PG_NAME(clamped)(v0, lo, hi);
            v1 = PG_NAME(clamped)(v1, lo, hi);
        }
        if (row_sums) { /* c is NULL: sum the row instead */
            if (whole) {
                row_sums[r] += PG_NAME(lanes_sum)(v0 + v1);
                continue;
            }
            float tmp[PG_TW], sum = 0.0f; /* the last panel's ragged edge */
            *(uvec *)tmp = v0;
            *(uvec *)(tmp + PG_VW) = v1;
            for (int64_t j = 0; j < cols; ++j) sum += tmp[j];
            row_sums[r] += sum;
            continue;
        }
        float *cr = c + r * ldc + col;
        if (e->next_panel && col == 0) { /* the next panel's C row, as for B above */
            __builtin_prefetch(cr + PG_PANEL, 1);
            __builtin_prefetch(cr + PG_PANEL + 16, 1);
        }
        if (whole) {
            *(uvec *)cr = v0;
            *(uvec *)(cr + PG_VW) = v1;
        } else { /* the last panel's ragged edge */
            PG_NAME(store_ragged)(cr, cols, v0, v1);
        }
    }
}

#undef PG_A
#undef PG_FETCH_NEXT

/* Rows [0, m) of C against one panel: `cols` (<= 32) columns at C's column col0. Row blocks
 * are balanced (pg_block_rows: ceil(m / PG_MR) blocks of nearly equal height, not full tiles
 * and a short rest) so no tile runs nearly empty. With `indirect`, vector v of the panel's row p is read at bases[v] + off[p] instead,
 * and A is packed by relvm_pgemm_pack_rows (lda is unused). */
#define PG_PANEL_BODY(INDIRECT, APACKED, SWITCH)                                               \
    const int64_t blocks = (m + PG_MR - 1) / PG_MR;                                            \
    int64_t r = 0;                                                                             \
    for (int64_t blk = 0; blk < blocks; ++blk) {                                               \
        const int rows = (int)pg_block_rows(m - r, blocks - blk);                              \
        const float *ab = a + r * (APACKED == 1 ? k : APACKED == 2 ? 1 : lda);                 \
        float *cb = c ? c + r * ldc : NULL; /* NULL: row sums, see pg_epilogue */              \
        for (int64_t col = 0; col < cols; col += PG_TW) {                                      \
            const int64_t left = cols - col;                                                   \
            const float *b0 = INDIRECT ? bases[col / PG_VW] : NULL;                            \
            const float *b1 = INDIRECT ? bases[col / PG_VW + 1] : NULL;                        \
            /* a panel read in place is fetched ahead once: by its first tile */               \
            const int64_t next = !INDIRECT || (blk == 0 && col == 0) ? e->next_panel : 0;      \
            SWITCH(INDIRECT, APACKED)                                                          \
        }                                                                                      \
        r += rows;                                                                             \
    }
/* The tile for the block's height; with HALF, one vector of columns (half = 1: the other's
 * multiply-adds are not run). */
#define PG_ROWS(INDIRECT, APACKED, HALF)                                                       \
    {                                                                                          \
        enum { half = HALF };                                                                  \
        switch (rows) {                                                                        \
            PG_CASE(INDIRECT, APACKED, 1) PG_CASE(INDIRECT, APACKED, 2)                        \
            PG_CASE(INDIRECT, APACKED, 3) PG_CASE(INDIRECT, APACKED, 4)                        \
            PG_MORE_CASES(INDIRECT, APACKED)                                                   \
        default: break;                                                                        \
        }                                                                                      \
    }
/* Two vectors of columns. */
#define PG_SWITCH_FULL(INDIRECT, APACKED) PG_ROWS(INDIRECT, APACKED, 0)
/* The same, or for a last panel of one vector of columns or fewer (a 16- or 24-channel layer,
 * 144 = 4.5 panels) the half tile. Only the kernels an NHWC conv or a dense layer use (panel,
 * rpanel): each doubles the tiles compiled. */
#define PG_SWITCH_HALF(INDIRECT, APACKED)                                                      \
    if (left > PG_VW)                                                                          \
        PG_ROWS(INDIRECT, APACKED, 0)                                                          \
    else                                                                                       \
        PG_ROWS(INDIRECT, APACKED, 1)
#define PG_CASE(INDIRECT, APACKED, R)                                                          \
    case R:                                                                                    \
        PG_NAME(tile)(R, INDIRECT, APACKED, k, ab, lda, panel, b0, b1, off, col, cb, ldc,      \
                      left, e, row0 + r, col0, next, part, half);                              \
        break;
/* A case per tile height the row blocks can have: 1 to PG_MR. */
#if PG_MR > 12
#error "PG_MORE_CASES: add the cases of tiles of more than 12 rows"
#elif PG_MR > 6
#define PG_MORE_CASES(I, P)                                                                    \
    PG_CASE(I, P, 5) PG_CASE(I, P, 6) PG_CASE(I, P, 7) PG_CASE(I, P, 8) PG_CASE(I, P, 9)       \
    PG_CASE(I, P, 10) PG_CASE(I, P, 11) PG_CASE(I, P, 12)
#elif PG_MR > 4
#define PG_MORE_CASES(I, P) PG_CASE(I, P, 5) PG_CASE(I, P, 6)
#else
#define PG_MORE_CASES(I, P)
#endif

static void PG_NAME(panel)(int64_t m, int64_t k, const float *a, int64_t lda,
                           const float *panel, float *c, int64_t ldc, int64_t cols,
                           const struct pg_epilogue *e, int64_t row0, int64_t col0) {
    const float *const *bases = NULL;
    const int64_t *off = NULL;
    const int part = 0;
    if (lda == PG_A_PACKED) {
        PG_PANEL_BODY(0, 1, PG_SWITCH_HALF)
    } else {
        PG_PANEL_BODY(0, 0, PG_SWITCH_FULL)
    }
}

static void PG_NAME(ipanel)(int64_t m, int64_t k, const float *a, int64_t lda,
                            const float *const *bases, const int64_t *off, float *c,
                            int64_t ldc, int64_t cols, const struct pg_epilogue *e,
                            int64_t row0, int64_t col0) {
    const float *panel = NULL;
    const int part = 0;
    PG_PANEL_BODY(1, 1, PG_SWITCH_FULL)
}

static void PG_NAME(apanel)(int64_t m, int64_t k, const float *a, const int64_t *off,
                            const float *panel, float *c, int64_t ldc, int64_t cols,
                            const struct pg_epilogue *e, int64_t row0, int64_t col0, int part) {
    const float *const *bases = NULL;
    const int64_t lda = 0;
    PG_PANEL_BODY(0, 2, PG_SWITCH_FULL)
}

static void PG_NAME(rpanel)(int64_t m, int64_t k, const float *a, int64_t lda,
                            const float *panel, float *c, int64_t ldc, int64_t cols,
                            const struct pg_epilogue *e, int64_t row0, int64_t col0, int part) {
    const float *const *bases = NULL;
    const int64_t *off = NULL;
    PG_PANEL_BODY(0, 0, PG_SWITCH_HALF)
}

#undef PG_PANEL_BODY
#undef PG_ROWS
#undef PG_SWITCH_FULL
#undef PG_SWITCH_HALF
#undef PG_CASE
#undef PG_MORE_CASES
#undef PG_TW
#undef PG_NAME
#undef PG_CAT
#undef PG_CAT2
