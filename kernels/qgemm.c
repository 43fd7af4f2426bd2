/* The integer GEMM of quantized products (qgemm.h): nn.matmul_integer, and nn.conv2d_integer
 * on it through a channels-last copy of each image unrolled into packed panels.
 *
 * Packed operands. a is packed a block of QG_MR rows at a time (its rows' sums, then its bytes
 * as [k / 4][QG_MR rows][4 k's]), b a panel of QG_NP columns at a time (its columns' sums,
 * then [k / 4][QG_NP columns][4 k's]); k is padded to a multiple of 4 with zeros, which add
 * nothing. a's bytes are unsigned, b's signed: an int8 a and a uint8 b are moved by 128 (their
 * top bit flipped), and their zero points with them, so (a - za) and (b - zb) are unchanged.
 * The tile (QG_MR rows x up to QG_NV panels) keeps its sums in registers over all of k; on
 * AVX-512 VNNI each k / 4 step is a load of each panel's 64 bytes and one vpdpbusd per row and
 * panel (a broadcast of the row's 4 bytes from memory). The zero points are applied to the
 * finished tile (see qgemm.h). All sums are taken modulo 2**32 (unsigned arithmetic, or the
 * wrapping vector adds), which is what int32 accumulation gives. */
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "relvm_config.h"
#include "qgemm.h"
#include "internal/scratch.h"
#include "internal/types.h"
#include "threads.h"

#define QG_MR 8    /* rows of a tile, and of a packed block of a */
#define QG_NP 16   /* columns of a packed panel of b */
#define QG_NV 3    /* panels of a tile */
#define QG_HEAD 64 /* bytes before a block's or a panel's data: its sums, as int32 */

static inline int64_t kgroups(int64_t k) { return (k + 3) / 4; }
static inline int64_t block_bytes(int64_t k) { return QG_HEAD + kgroups(k) * QG_MR * 4; }
static inline int64_t panel_bytes(int64_t k) { return QG_HEAD + kgroups(k) * QG_NP * 4; }
static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int quantized(int dtype) { return dtype == RELVM_INT8 || dtype == RELVM_UINT8; }

/* What a packed a's bytes are xor-ed with (int8 -> unsigned), and a packed b's. */
static inline uint8_t a_flip(int dtype) { return dtype == RELVM_INT8 ? 0x80 : 0; }
static inline uint8_t b_flip(int dtype) { return dtype == RELVM_UINT8 ? 0x80 : 0; }

static inline int32_t zp_at(int dtype, const void *zp, int64_t i) {
    return dtype == RELVM_INT8 ? ((const i8 *)zp)[i] : ((const u8 *)zp)[i];
}
/* A zero point as the packed bytes see it. */
static inline int32_t a_zp(int dtype, const void *zp, int64_t i) {
    return zp_at(dtype, zp, i) + (dtype == RELVM_INT8 ? 128 : 0);
}
static inline int32_t b_zp(int dtype, const void *zp, int64_t i) {
    return zp_at(dtype, zp, i) - (dtype == RELVM_UINT8 ? 128 : 0);
}

/* --- the tile ----------------------------------------------------------------------------------
 * c (rows x cols, row stride ldc) = the block of a times nv panels of b (panel_stride bytes
 * apart), then less za[r] * (column sums) and zb[j] * (row sums - k * za[r]); zb holds one value
 * per column of the nv panels. */
typedef void qg_tile_fn(int rows, int nv, int64_t kg, const uint8_t *block, const uint8_t *panel,
                        int64_t panel_stride, int cols, const int32_t *za, const int32_t *zb,
                        uint32_t k, int32_t *c, int64_t ldc);
/* A packed panel's column sums (its head), from its data. */
typedef void qg_sums_fn(int64_t kg, uint8_t *panel);
/* A packed block as a tile reads it, made once per block into `wide` (wide_bytes(k)), where
 * the tile wants its bytes widened (AVX2: to int16). */
typedef void qg_widen_fn(int64_t kg, const uint8_t *block, uint8_t *wide);

static inline int64_t wide_bytes(int64_t k) { return QG_HEAD + kgroups(k) * QG_MR * 8; }

static inline void tile_portable_body(int rows, int nv, int64_t kg, const uint8_t *block,
                                      const uint8_t *panel, int64_t panel_stride, int cols,
                                      const int32_t *za, const int32_t *zb, uint32_t k,
                                      int32_t *c, int64_t ldc) {
    uint32_t acc[QG_MR][QG_NV * QG_NP];
    memset(acc, 0, sizeof acc);
    const uint8_t *a = block + QG_HEAD;
    for (int64_t g = 0; g < kg; ++g) {
        for (int r = 0; r < rows; ++r) {
            const uint8_t *ar = a + g * QG_MR * 4 + r * 4;
            const int32_t a0 = ar[0], a1 = ar[1], a2 = ar[2], a3 = ar[3];
            for (int v = 0; v < nv; ++v) {
                const i8 *b = (const i8 *)(panel + v * panel_stride + QG_HEAD + g * QG_NP * 4);
                uint32_t *out = acc[r] + v * QG_NP;
                for (int j = 0; j < QG_NP; ++j) /* each sum of 4 products fits in 18 bits */
                    out[j] += (uint32_t)(a0 * b[4 * j] + a1 * b[4 * j + 1] + a2 * b[4 * j + 2] +
                                         a3 * b[4 * j + 3]);
            }
        }
    }
    const int32_t *row_sums = (const int32_t *)block;
    for (int r = 0; r < rows; ++r) {
        const uint32_t zr = (uint32_t)za[r], rest = (uint32_t)row_sums[r] - k * zr;
        for (int j = 0; j < cols; ++j) {
            const int32_t *col_sums = (const int32_t *)(panel + j / QG_NP * panel_stride);
            const uint32_t v = acc[r][j] - zr * (uint32_t)col_sums[j % QG_NP] -
                               (uint32_t)zb[j] * rest;
            c[r * ldc + j] = (int32_t)v;
        }
    }
}

RELVM_ISA_VERSIONS(static, tile_portable,
                   (int rows, int nv, int64_t kg, const uint8_t *block, const uint8_t *panel,
                    int64_t panel_stride, int cols, const int32_t *za, const int32_t *zb,
                    uint32_t k, int32_t *c, int64_t ldc),
                   tile_portable_body(rows, nv, kg, block, panel, panel_stride, cols, za, zb,
                                      k, c, ldc))

static void sums_portable(int64_t kg, uint8_t *panel) {
    uint32_t sums[QG_NP] = {0};
    for (int64_t g = 0; g < kg; ++g) {
        const i8 *b = (const i8 *)(panel + QG_HEAD + g * QG_NP * 4);
        for (int j = 0; j < QG_NP; ++j)
            sums[j] += (uint32_t)(b[4 * j] + b[4 * j + 1] + b[4 * j + 2] + b[4 * j + 3]);
    }
    memcpy(panel, sums, sizeof sums);
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define QG_VNNI 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vnni")

/* The tile for `rows` rows and `nv` panels, both constants where it is inlined: its sums are
 * named variables (c<row><panel>; GCC kept an array of them on the stack), those of rows and
 * panels past the tile's unused. */
#define QG_SUMS(r) __m512i c##r##0 = zero, c##r##1 = zero, c##r##2 = zero;
#define QG_STEP(r)                                                                             \
    if (rows > r) {                                                                            \
        int32_t four;                                                                          \
        memcpy(&four, a + g * QG_MR * 4 + r * 4, 4);                                           \
        const __m512i av = _mm512_set1_epi32(four);                                            \
        c##r##0 = _mm512_dpbusd_epi32(c##r##0, av, b0);                                        \
        if (nv > 1) c##r##1 = _mm512_dpbusd_epi32(c##r##1, av, b1);                            \
        if (nv > 2) c##r##2 = _mm512_dpbusd_epi32(c##r##2, av, b2);                            \
    }
#define QG_KEEP(r)                                                                             \
    if (rows > r) {                                                                            \
        _mm512_store_si512((void *)done[r][0], c##r##0);                                       \
        if (nv > 1) _mm512_store_si512((void *)done[r][1], c##r##1);                           \
        if (nv > 2) _mm512_store_si512((void *)done[r][2], c##r##2);                           \
    }

static inline __m512i panel_vector(const uint8_t *at) {
    return _mm512_load_si512((const void *)at);
}

static inline __mmask16 column_mask(int left) {
    return left >= QG_NP ? (__mmask16)0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
}

static inline __attribute__((always_inline)) void
tile_vnni_body(const int rows, const int nv, int64_t kg, const uint8_t *block,
               const uint8_t *panel, int64_t panel_stride, int cols, const int32_t *za,
               const int32_t *zb, uint32_t k, int32_t *c, int64_t ldc) {
    const __m512i zero = _mm512_setzero_si512();
    QG_SUMS(0) QG_SUMS(1) QG_SUMS(2) QG_SUMS(3) QG_SUMS(4) QG_SUMS(5) QG_SUMS(6) QG_SUMS(7)
    const uint8_t *a = block + QG_HEAD;
    const uint8_t *p0 = panel + QG_HEAD, *p1 = p0 + panel_stride, *p2 = p1 + panel_stride;
    for (int64_t g = 0; g < kg; ++g) {
        const __m512i b0 = panel_vector(p0 + g * QG_NP * 4);
        const __m512i b1 = nv > 1 ? panel_vector(p1 + g * QG_NP * 4) : zero;
        const __m512i b2 = nv > 2 ? panel_vector(p2 + g * QG_NP * 4) : zero;
        QG_STEP(0) QG_STEP(1) QG_STEP(2) QG_STEP(3) QG_STEP(4) QG_STEP(5) QG_STEP(6) QG_STEP(7)
    }
    /* The sums leave their registers at once: kept live into the zero points' arithmetic
     * below, GCC spilled them to the stack on every step of the loop. */
    int32_t done[QG_MR][QG_NV][QG_NP] __attribute__((aligned(64)));
    QG_KEEP(0) QG_KEEP(1) QG_KEEP(2) QG_KEEP(3) QG_KEEP(4) QG_KEEP(5) QG_KEEP(6) QG_KEEP(7)
    const int32_t *row_sums = (const int32_t *)block;
    for (int v = 0; v < nv; ++v) {
        const __m512i col_sums = panel_vector(panel + v * panel_stride);
        const __m512i zbv = _mm512_loadu_si512((const void *)(zb + v * QG_NP));
        const __mmask16 mask = column_mask(cols - v * QG_NP);
        for (int r = 0; r < rows; ++r) {
            const uint32_t rest = (uint32_t)row_sums[r] - k * (uint32_t)za[r];
            __m512i out = _mm512_load_si512((const void *)done[r][v]);
            out = _mm512_sub_epi32(out, _mm512_mullo_epi32(_mm512_set1_epi32(za[r]), col_sums));
            out = _mm512_sub_epi32(out, _mm512_mullo_epi32(_mm512_set1_epi32((int32_t)rest), zbv));
            _mm512_mask_storeu_epi32(c + r * ldc + v * QG_NP, mask, out);
        }
    }
}
#undef QG_SUMS
#undef QG_STEP
#undef QG_KEEP

/* One copy of the tile per (rows, panels), so that its sums stay in registers. */
static void tile_vnni(int rows, int nv, int64_t kg, const uint8_t *block, const uint8_t *panel,
                      int64_t panel_stride, int cols, const int32_t *za, const int32_t *zb,
                      uint32_t k, int32_t *c, int64_t ldc) {
#define QG_CASE(R, V)                                                                          \
    case (R) * 4 + (V):                                                                        \
        tile_vnni_body(R, V, kg, block, panel, panel_stride, cols, za, zb, k, c, ldc);         \
        return;
#define QG_ROW(R) QG_CASE(R, 1) QG_CASE(R, 2) QG_CASE(R, 3)
    switch (rows * 4 + nv) {
        QG_ROW(1) QG_ROW(2) QG_ROW(3) QG_ROW(4) QG_ROW(5) QG_ROW(6) QG_ROW(7) QG_ROW(8)
    default: break;
    }
#undef QG_ROW
#undef QG_CASE
}

static void sums_vnni(int64_t kg, uint8_t *panel) {
    __m512i sums = _mm512_setzero_si512();
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t g = 0; g < kg; ++g)
        sums = _mm512_dpbusd_epi32(
            sums, ones, _mm512_load_si512((const void *)(panel + QG_HEAD + g * QG_NP * 4)));
    _mm512_store_si512((void *)panel, sums);
}
#pragma GCC pop_options
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define QG_AVX2 1
#pragma GCC push_options
#pragma GCC target("avx2")
/* AVX2 has no byte dot product that cannot saturate (vpmaddubsw's 16-bit pair sums can), so a
 * step multiplies 16-bit values: vpmaddwd of b's bytes widened to int16 (4 columns x 4 k's a
 * vector) by a row's 4 bytes, widened once per block and broadcast, gives each column two
 * exact partial sums, added pairwise at the end. */
static void widen_avx2(int64_t kg, const uint8_t *block, uint8_t *wide) {
    memcpy(wide, block, QG_HEAD);
    const uint8_t *a = block + QG_HEAD;
    uint8_t *w = wide + QG_HEAD;
    for (int64_t g = 0; g < kg; ++g) { /* 8 rows x 4 bytes -> 8 rows x 4 int16 */
        const __m128i lo = _mm_loadu_si128((const __m128i *)(a + g * 32));
        const __m128i hi = _mm_loadu_si128((const __m128i *)(a + g * 32 + 16));
        _mm256_storeu_si256((__m256i *)(w + g * 64), _mm256_cvtepu8_epi16(lo));
        _mm256_storeu_si256((__m256i *)(w + g * 64 + 32), _mm256_cvtepu8_epi16(hi));
    }
}

/* `rows` (1 to 4, a constant where inlined) rows of the widened block from `a` times 8
 * columns of a panel from `b`: out[r] holds row r's 8 sums. */
static inline __attribute__((always_inline)) void
rows_avx2(const int rows, int64_t kg, const uint8_t *a, const uint8_t *b, __m256i *out) {
    const __m256i zero = _mm256_setzero_si256();
    __m256i c00 = zero, c01 = zero, c10 = zero, c11 = zero, c20 = zero, c21 = zero, c30 = zero,
            c31 = zero;
    for (int64_t g = 0; g < kg; ++g) {
        const __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + g * 64)));
        const __m256i b1 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + g * 64 + 16)));
        int64_t four;
#define QG_ROW_STEP(r)                                                                         \
    if (rows > r) {                                                                            \
        memcpy(&four, a + g * 64 + r * 8, 8);                                                  \
        const __m256i av = _mm256_set1_epi64x(four);                                           \
        c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(b0, av));                       \
        c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(b1, av));                        \
    }
        QG_ROW_STEP(0) QG_ROW_STEP(1) QG_ROW_STEP(2) QG_ROW_STEP(3)
#undef QG_ROW_STEP
    }
    /* [c0 c0 c1 c1 | c2 c2 c3 c3] and [c4 ... c7]: pairs added, lanes put in order */
    out[0] = _mm256_permute4x64_epi64(_mm256_hadd_epi32(c00, c01), 0xD8);
    if (rows > 1) out[1] = _mm256_permute4x64_epi64(_mm256_hadd_epi32(c10, c11), 0xD8);
    if (rows > 2) out[2] = _mm256_permute4x64_epi64(_mm256_hadd_epi32(c20, c21), 0xD8);
    if (rows > 3) out[3] = _mm256_permute4x64_epi64(_mm256_hadd_epi32(c30, c31), 0xD8);
}

/* The tile, 8 columns (half a panel) and 4 rows at a time; `block` widened by widen_avx2. */
static void tile_avx2(int rows, int nv, int64_t kg, const uint8_t *block, const uint8_t *panel,
                      int64_t panel_stride, int cols, const int32_t *za, const int32_t *zb,
                      uint32_t k, int32_t *c, int64_t ldc) {
    const int32_t *row_sums = (const int32_t *)block;
    for (int j0 = 0; j0 < cols; j0 += 8) {
        const uint8_t *p = panel + j0 / QG_NP * panel_stride;
        const uint8_t *b = p + QG_HEAD + j0 % QG_NP / 8 * 32;
        const __m256i col_sums = _mm256_loadu_si256((const __m256i *)((const int32_t *)p +
                                                                      j0 % QG_NP));
        const __m256i zbv = _mm256_loadu_si256((const __m256i *)(zb + j0));
        const int n = cols - j0 < 8 ? cols - j0 : 8;
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n),
                                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        for (int r0 = 0; r0 < rows; r0 += 4) {
            __m256i sums[4];
            const uint8_t *a = block + QG_HEAD + r0 * 8;
            switch (rows - r0 < 4 ? rows - r0 : 4) {
            case 1: rows_avx2(1, kg, a, b, sums); break;
            case 2: rows_avx2(2, kg, a, b, sums); break;
            case 3: rows_avx2(3, kg, a, b, sums); break;
            default: rows_avx2(4, kg, a, b, sums); break;
            }
            for (int r = r0; r < rows && r < r0 + 4; ++r) {
                const uint32_t rest = (uint32_t)row_sums[r] - k * (uint32_t)za[r];
                __m256i out = _mm256_sub_epi32(
                    sums[r - r0], _mm256_mullo_epi32(_mm256_set1_epi32(za[r]), col_sums));
                out = _mm256_sub_epi32(out,
                                       _mm256_mullo_epi32(_mm256_set1_epi32((int32_t)rest), zbv));
                _mm256_maskstore_epi32(c + r * ldc + j0, mask, out);
            }
        }
    }
}
#pragma GCC pop_options
#endif

static pthread_once_t choose_once = PTHREAD_ONCE_INIT;
static qg_tile_fn *chosen_tile;
static qg_sums_fn *chosen_sums;
static qg_widen_fn *chosen_widen;
static const char *chosen_isa = "portable";

/* VNNI where the CPU has it, else AVX2, unless RELVM_PGEMM_ISA holds the GEMMs to avx2 or
 * sse2 (the portable tile). */
static void choose(void) {
    chosen_tile = tile_portable;
    chosen_sums = sums_portable;
    chosen_widen = NULL;
#ifdef QG_VNNI
    const char *cap = getenv("RELVM_PGEMM_ISA");
    const int upto = !cap ? 2 : strcmp(cap, "avx2") == 0 ? 1 : strcmp(cap, "sse2") == 0 ? 0 : 2;
    __builtin_cpu_init();
    if (upto >= 2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni")) {
        chosen_tile = tile_vnni;
        chosen_sums = sums_vnni;
        chosen_isa = "avx512vnni";
    } else if (upto >= 1 && __builtin_cpu_supports("avx2")) {
        chosen_tile = tile_avx2;
        chosen_widen = widen_avx2;
        chosen_isa = "avx2";
    }
#endif
}

static void chosen(qg_tile_fn **tile, qg_sums_fn **sums, qg_widen_fn **widen) {
    pthread_once(&choose_once, choose);
    *tile = chosen_tile;
    *sums = chosen_sums;
    *widen = chosen_widen;
}

RELVM_EXPORT const char *relvm_qgemm_isa(void) {
    pthread_once(&choose_once, choose);
    return chosen_isa;
}

/* Runs `panels` panels (from `panel`) against one block: tiles of up to QG_NV panels. */
static void run_block(qg_tile_fn *tile, int rows, int64_t k, const uint8_t *block,
                      const uint8_t *panel, int64_t panels, int64_t cols, const int32_t *za,
                      const int32_t *zb, int32_t *c, int64_t ldc) {
    const int64_t kg = kgroups(k), ps = panel_bytes(k);
    for (int64_t q = 0; q < panels; q += QG_NV) {
        const int nv = (int)relvm_min64(QG_NV, panels - q);
        const int tile_cols = (int)relvm_min64(nv * QG_NP, cols - q * QG_NP);
        tile(rows, nv, kg, block, panel + q * ps, ps, tile_cols, za, zb + q * QG_NP,
             (uint32_t)k, c + q * QG_NP, ldc);
    }
}

/* --- packing --------------------------------------------------------------------------------- */

/* `rows` rows of a (row r at src[r], k bytes) into a block, xor-ed with `flip`; the rest of
 * the block's rows are zeros. */
static void pack_block(const uint8_t *const *src, int rows, int64_t k, uint8_t flip,
                       uint8_t *block) {
    const int64_t kg = kgroups(k);
    int32_t sums[QG_MR] = {0};
    uint8_t *data = block + QG_HEAD;
    if (rows < QG_MR || k % 4) memset(data, 0, (size_t)(kg * QG_MR * 4));
    const uint32_t flips = flip * 0x01010101u;
    for (int r = 0; r < rows; ++r) {
        const uint8_t *row = src[r];
        uint32_t sum = 0;
        for (int64_t p = 0; p < k; ++p) sum += (uint8_t)(row[p] ^ flip); /* (vectorized) */
        sums[r] = (int32_t)sum;
        int64_t p = 0;
        for (; p + 4 <= k; p += 4) { /* 4 bytes at a time into their place in the block */
            uint32_t four;
            memcpy(&four, row + p, 4);
            four ^= flips;
            memcpy(data + p * QG_MR + r * 4, &four, 4);
        }
        for (; p < k; ++p) data[p / 4 * QG_MR * 4 + r * 4 + p % 4] = row[p] ^ flip;
    }
    memcpy(block, sums, sizeof sums);
}

RELVM_EXPORT int64_t relvm_qgemm_packed_b_size(int64_t k, int64_t n) {
    return ceil_div(n, QG_NP) * panel_bytes(k);
}

/* Columns [col0, col0 + QG_NP) of b (k x n) into a panel (zeros past n). */
static void pack_panel(const uint8_t *b, int64_t k, int64_t n, int64_t col0, uint8_t flip,
                       qg_sums_fn *sums, uint8_t *panel) {
    const int64_t cols = relvm_min64(QG_NP, n - col0);
    uint8_t *data = panel + QG_HEAD;
    if (cols < QG_NP || k % 4) memset(data, 0, (size_t)(kgroups(k) * QG_NP * 4));
    for (int64_t p = 0; p < k; ++p) {
        const uint8_t *row = b + p * n + col0;
        uint8_t *out = data + p / 4 * QG_NP * 4 + p % 4;
        for (int64_t j = 0; j < cols; ++j) out[j * 4] = row[j] ^ flip;
    }
    sums(kgroups(k), panel);
}

RELVM_EXPORT void relvm_qgemm_pack_b(int dtype, int64_t k, int64_t n, const void *b,
                                     void *packed) {
    qg_tile_fn *tile;
    qg_sums_fn *sums;
    qg_widen_fn *widen;
    chosen(&tile, &sums, &widen);
    for (int64_t q = 0; q * QG_NP < n; ++q)
        pack_panel(b, k, n, q * QG_NP, b_flip(dtype), sums,
                   (uint8_t *)packed + q * panel_bytes(k));
}

/* --- nn.matmul_integer ----------------------------------------------------------------------- */

/* The GEMMs of a call: `gemms` of `rows` rows each (one GEMM of batch * m rows when every batch
 * item shares b). Task t is GEMM t / (blocks * chunks), its block of rows (t / chunks) % blocks
 * and chunk of panels t % chunks: a task packs its block of a once for its chunk. */
struct mm_job {
    qg_tile_fn *tile;
    qg_widen_fn *widen;
    int a_dtype;
    int64_t m, n, k, gemms, rows, blocks, panels, chunk, chunks, b_bytes;
    const uint8_t *a;
    int64_t stride_a;
    const uint8_t *packed_b;
    const int32_t *za, *zb; /* za: 1 or m values (za_step 0 or 1); zb: one per padded column */
    int za_step;
    int32_t *c;
    atomic_int *failed; /* set by a thread that found no memory for its scratch */
};

static void mm_tasks(void *ctx, int64_t begin, int64_t end) {
    const struct mm_job *j = ctx;
    const int64_t wide = j->widen ? wide_bytes(j->k) : 0;
    uint8_t *block = (uint8_t *)relvm_scratch_floats((size_t)((block_bytes(j->k) + wide) / 4));
    if (!block) {
        atomic_store(j->failed, 1);
        return;
    }
    for (int64_t t = begin; t < end; ++t) {
        const int64_t gemm = t / (j->blocks * j->chunks), blk = t / j->chunks % j->blocks;
        const int64_t chunk = t % j->chunks, r0 = blk * QG_MR;
        const int rows = (int)relvm_min64(QG_MR, j->rows - r0);
        const uint8_t *src[QG_MR];
        int32_t za[QG_MR];
        for (int r = 0; r < rows; ++r) {
            /* row r0 + r of this GEMM: item `item` of the batch, its row `row` */
            const int64_t at = r0 + r, item = j->gemms > 1 ? gemm : at / j->m;
            const int64_t row = j->gemms > 1 ? at : at % j->m;
            src[r] = j->a + item * j->stride_a + row * j->k;
            za[r] = j->za[j->za_step * row];
        }
        pack_block(src, rows, j->k, a_flip(j->a_dtype), block);
        const uint8_t *read = block; /* the block as the tile reads it */
        if (j->widen) {
            j->widen(kgroups(j->k), block, block + block_bytes(j->k));
            read = block + block_bytes(j->k);
        }
        const int64_t q0 = chunk * j->chunk, q1 = relvm_min64(j->panels, q0 + j->chunk);
        const uint8_t *panel = j->packed_b + gemm * j->b_bytes + q0 * panel_bytes(j->k);
        int32_t *c = j->c + (gemm * j->rows + r0) * j->n + q0 * QG_NP;
        run_block(j->tile, rows, j->k, read, panel, q1 - q0, j->n - q0 * QG_NP, za,
                  j->zb + q0 * QG_NP, c, j->n);
    }
}

/* Packs item t / panels of b, its panel t % panels. */
struct pack_job {
    qg_sums_fn *sums;
    int dtype;
    int64_t k, n, panels, stride;
    const uint8_t *b;
    uint8_t *packed;
};

static void pack_tasks(void *ctx, int64_t begin, int64_t end) {
    const struct pack_job *j = ctx;
    for (int64_t t = begin; t < end; ++t) {
        const int64_t item = t / j->panels, q = t % j->panels;
        pack_panel(j->b + item * j->stride, j->k, j->n, q * QG_NP, b_flip(j->dtype), j->sums,
                   j->packed + t * panel_bytes(j->k));
    }
}

/* How many chunks to split `panels` panels into so that `tasks` tasks of whole rows become
 * enough for the threads (a few each), each chunk at least a tile wide. */
static int64_t chunks_for(int64_t tasks, int64_t panels) {
    const int64_t want = 4 * (int64_t)relvm_threads_get();
    if (tasks >= want) return 1;
    return relvm_max64(1, relvm_min64(ceil_div(want, tasks), ceil_div(panels, QG_NV)));
}

RELVM_EXPORT int relvm_matmul_integer(int a_dtype, int b_dtype, int64_t batch, int64_t m,
                                      int64_t n, int64_t k, const void *a, int64_t stride_a,
                                      const void *b, int64_t stride_b, const void *packed_b,
                                      const void *a_zero_point, int64_t a_zp_count,
                                      const void *b_zero_point, int64_t b_zp_count, void *c) {
    if (!quantized(a_dtype) || !quantized(b_dtype) || batch < 0 || m < 0 || n < 0 || k < 0 ||
        stride_a < 0 || stride_b < 0 || (a_zp_count != 1 && a_zp_count != m) ||
        (b_zp_count != 1 && b_zp_count != n) || (packed_b && stride_b))
        return RELVM_UNSUPPORTED;
    if (batch == 0 || m == 0 || n == 0) return RELVM_OK;
    qg_tile_fn *tile;
    qg_sums_fn *sums;
    qg_widen_fn *widen;
    chosen(&tile, &sums, &widen);
    const int64_t panels = ceil_div(n, QG_NP), b_items = stride_b ? batch : 1;
    const int64_t b_bytes = panels * panel_bytes(k);
    int32_t *zps = malloc((size_t)(a_zp_count + panels * QG_NP) * sizeof(int32_t));
    uint8_t *own_b = packed_b ? NULL : aligned_alloc(64, (size_t)(b_items * b_bytes));
    if (!zps || (!packed_b && !own_b)) {
        free(zps);
        free(own_b);
        return RELVM_NO_MEMORY;
    }
    int32_t *za = zps, *zb = zps + a_zp_count;
    for (int64_t i = 0; i < a_zp_count; ++i) za[i] = a_zp(a_dtype, a_zero_point, i);
    for (int64_t j = 0; j < panels * QG_NP; ++j)
        zb[j] = j < n ? b_zp(b_dtype, b_zero_point, b_zp_count == 1 ? 0 : j) : 0;
    if (own_b) {
        struct pack_job pj = {sums, b_dtype, k, n, panels, stride_b, b, own_b};
        relvm_parallel_for(b_items * panels,
                           relvm_max64(1, RELVM_GRAIN / relvm_max64(1, k * QG_NP)), pack_tasks,
                           &pj);
    }
    /* Every batch item shares b (and a is one contiguous run of them): one tall GEMM. */
    const int shared = stride_b == 0 && (batch == 1 || stride_a == m * k);
    const int64_t gemms = shared ? 1 : batch, rows = shared ? batch * m : m;
    const int64_t blocks = ceil_div(rows, QG_MR);
    const int64_t chunks = chunks_for(gemms * blocks, panels);
    const int64_t chunk = ceil_div(ceil_div(panels, chunks), QG_NV) * QG_NV;
    atomic_int failed = 0;
    struct mm_job job = {tile, widen, a_dtype, m, n, k, gemms, rows, blocks, panels, chunk,
                         ceil_div(panels, chunk), stride_b ? b_bytes : 0, a, stride_a,
                         packed_b ? packed_b : own_b, za, zb, a_zp_count == 1 ? 0 : 1, c,
                         &failed};
    relvm_parallel_for(gemms * blocks * job.chunks, 1, mm_tasks, &job);
    free(zps);
    free(own_b);
    return atomic_load(&failed) ? RELVM_NO_MEMORY : RELVM_OK;
}

/* --- nn.conv2d_integer ----------------------------------------------------------------------- */

/* A conv's GEMM per image and group: its weights are a (rows: the group's output channels; k:
 * each tap's channels, padded to a multiple of 4, tap by tap), the unrolled image b (columns:
 * the output pixels). */
struct conv_dims {
    int64_t cg, ocg, c4, taps, k, k_real, pixels, blocks, group_bytes;
};

static struct conv_dims conv_dims(const struct relvm_conv2d_shape *s) {
    struct conv_dims d;
    d.cg = s->c / s->groups;
    d.ocg = s->oc / s->groups;
    d.c4 = (d.cg + 3) / 4 * 4;
    d.taps = s->kh * s->kw;
    d.k = d.taps * d.c4;
    d.k_real = d.taps * d.cg;
    d.pixels = s->oh * s->ow;
    d.blocks = ceil_div(d.ocg, QG_MR);
    d.group_bytes = d.blocks * block_bytes(d.k);
    return d;
}

static int depthwise(const struct relvm_conv2d_shape *s) { return s->c == s->groups; }

/* A 1x1 conv of stride 1 without padding: its unrolled image is the image (a channel's plane
 * is a row of b), packed straight from the input. */
static int pointwise(const struct relvm_conv2d_shape *s) {
    return s->kh == 1 && s->kw == 1 && s->sh == 1 && s->sw == 1 && s->pt == 0 && s->pl == 0 &&
           s->oh == s->h && s->ow == s->w;
}

RELVM_EXPORT int64_t relvm_conv2d_integer_packed_size(const struct relvm_conv2d_shape *s) {
    return depthwise(s) ? 0 : s->groups * conv_dims(s).group_bytes;
}

RELVM_EXPORT void relvm_conv2d_integer_pack_weights(const struct relvm_conv2d_shape *s,
                                                    int dtype, const void *w_, void *packed) {
    const struct conv_dims d = conv_dims(s);
    const uint8_t *w = w_;
    const uint8_t flip = a_flip(dtype);
    /* One output channel's weights in the GEMM's k order (tap, channel), padded with zeros. */
    uint8_t *row = malloc((size_t)relvm_max64(1, QG_MR * d.k));
    if (!row) return;
    for (int64_t g = 0; g < s->groups; ++g) {
        for (int64_t blk = 0; blk < d.blocks; ++blk) {
            const int rows = (int)relvm_min64(QG_MR, d.ocg - blk * QG_MR);
            const uint8_t *src[QG_MR];
            memset(row, 0, (size_t)(QG_MR * d.k));
            for (int r = 0; r < rows; ++r) {
                const uint8_t *wo = w + (g * d.ocg + blk * QG_MR + r) * d.cg * d.taps;
                uint8_t *out = row + r * d.k;
                for (int64_t ci = 0; ci < d.cg; ++ci)
                    for (int64_t t = 0; t < d.taps; ++t)
                        out[t * d.c4 + ci] = wo[ci * d.taps + t] ^ flip;
                src[r] = out;
            }
            uint8_t *block = (uint8_t *)packed + g * d.group_bytes + blk * block_bytes(d.k);
            pack_block(src, rows, d.k, 0, block); /* (flipped above: padding stays zero) */
            /* pack_block summed the padding's zeros too: nothing to correct */
        }
    }
    free(row);
}

/* dst[p * dst_stride + ch] = src[ch * src_stride + p] ^ flip for ch < channels, p < pixels:
 * 16 x 16 blocks transposed in SSE2 registers (a byte at a time, strided, the copy took half
 * of a 1x1 conv's time). */
static void transpose_bytes(const uint8_t *src, int64_t src_stride, int64_t channels,
                            int64_t pixels, uint8_t *dst, int64_t dst_stride, uint8_t flip) {
    int64_t ch = 0;
#if defined(__SSE2__)
    const __m128i flips = _mm_set1_epi8((char)flip);
    for (; ch + 16 <= channels; ch += 16) {
        int64_t p = 0;
        for (; p + 16 <= pixels; p += 16) {
            __m128i r[16], t[16];
            for (int i = 0; i < 16; ++i)
                r[i] = _mm_xor_si128(
                    _mm_loadu_si128((const __m128i *)(src + (ch + i) * src_stride + p)), flips);
            for (int i = 0; i < 8; ++i) { /* pairs of rows, byte by byte */
                t[2 * i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
                t[2 * i + 1] = _mm_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
            }
            for (int i = 0; i < 4; ++i) { /* fours of rows, two bytes at a time */
                r[4 * i] = _mm_unpacklo_epi16(t[4 * i], t[4 * i + 2]);
                r[4 * i + 1] = _mm_unpackhi_epi16(t[4 * i], t[4 * i + 2]);
                r[4 * i + 2] = _mm_unpacklo_epi16(t[4 * i + 1], t[4 * i + 3]);
                r[4 * i + 3] = _mm_unpackhi_epi16(t[4 * i + 1], t[4 * i + 3]);
            }
            for (int i = 0; i < 2; ++i) { /* eights of rows, four bytes at a time */
                for (int j = 0; j < 4; ++j) {
                    t[8 * i + 2 * j] = _mm_unpacklo_epi32(r[8 * i + j], r[8 * i + j + 4]);
                    t[8 * i + 2 * j + 1] = _mm_unpackhi_epi32(r[8 * i + j], r[8 * i + j + 4]);
                }
            }
            for (int j = 0; j < 8; ++j) { /* all 16 rows: pixel 2j and 2j + 1 */
                r[2 * j] = _mm_unpacklo_epi64(t[j], t[j + 8]);
                r[2 * j + 1] = _mm_unpackhi_epi64(t[j], t[j + 8]);
            }
            for (int i = 0; i < 16; ++i)
                _mm_storeu_si128((__m128i *)(dst + (p + i) * dst_stride + ch), r[i]);
        }
        for (; p < pixels; ++p)
            for (int64_t i = 0; i < 16; ++i)
                dst[p * dst_stride + ch + i] = src[(ch + i) * src_stride + p] ^ flip;
    }
#endif
    for (; ch < channels; ++ch)
        for (int64_t p = 0; p < pixels; ++p)
            dst[p * dst_stride + ch] = src[ch * src_stride + p] ^ flip;
}

/* The channels-last copy of the input, (n, h, w, groups, c4), its bytes flipped as b's and a
 * group's channels past its own zero: task t is image t / chunks, its pixels in chunk
 * t % chunks. */
#define QG_COPY_PIXELS 256
struct nhwc_job {
    const struct relvm_conv2d_shape *s;
    struct conv_dims d;
    uint8_t flip;
    int64_t chunks;
    const uint8_t *x;
    uint8_t *out;
};

static void nhwc_chunks(void *ctx, int64_t begin, int64_t end) {
    const struct nhwc_job *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t plane = s->h * s->w, pixel = s->groups * j->d.c4; /* bytes of a pixel */
    for (int64_t t = begin; t < end; ++t) {
        const int64_t img = t / j->chunks, p0 = t % j->chunks * QG_COPY_PIXELS;
        const int64_t pixels = relvm_min64(QG_COPY_PIXELS, plane - p0);
        uint8_t *out = j->out + (img * plane + p0) * pixel;
        if (j->d.c4 != j->d.cg) memset(out, 0, (size_t)(pixels * pixel));
        for (int64_t g = 0; g < s->groups; ++g)
            transpose_bytes(j->x + (img * s->c + g * j->d.cg) * plane + p0, plane, j->d.cg,
                            pixels, out + g * j->d.c4, pixel, j->flip);
    }
}

/* Task t: image t / (groups * chunks), group t / chunks % groups, chunk of pixel panels
 * t % chunks, unrolled into this thread's scratch, then run against every block of the
 * group's weights. */
struct conv_job {
    const struct relvm_conv2d_shape *s;
    struct conv_dims d;
    qg_tile_fn *tile;
    qg_sums_fn *sums;
    qg_widen_fn *widen;
    int64_t panels, chunk, chunks;
    const uint8_t *nhwc, *pattern, *packed_w;
    const int32_t *za; /* one per output channel (za_step 1) or one for all (0) */
    int za_step;
    const int32_t *zb; /* x's zero point, QG_NV * QG_NP times */
    int32_t *y;
    atomic_int *failed;
    const uint8_t *direct; /* a pointwise conv's input, packed from as it is; else NULL */
    uint8_t flip;          /* (what its bytes are xor-ed with) */
};

/* Output pixels [p0, p0 + QG_NP) of image img, group g, unrolled into a panel: for each pixel,
 * each tap's c4 channels (the zero point's pattern where the tap reads padding). */
static void unroll_panel(const struct conv_job *j, int64_t img, int64_t g, int64_t p0,
                         uint8_t *panel) {
    const struct relvm_conv2d_shape *s = j->s;
    const struct conv_dims *d = &j->d;
    const int64_t per_tap = d->c4 / 4, pixel = s->groups * d->c4, wide = d->c4 / 16 * 16;
    uint8_t *data = panel + QG_HEAD;
    const uint8_t *image = j->nhwc + img * s->h * s->w * pixel + g * d->c4;
    /* Where each pixel's window starts (pixels past the plane read the pattern: their sums
     * are never stored). */
    int64_t y0[QG_NP], x0[QG_NP];
    for (int jj = 0; jj < QG_NP; ++jj) {
        const int64_t p = relvm_min64(p0 + jj, d->pixels - 1);
        y0[jj] = p0 + jj < d->pixels ? p / s->ow * s->sh - s->pt : -(s->kh * s->dh) - 1;
        x0[jj] = p % s->ow * s->sw - s->pl;
    }
    for (int64_t ky = 0; ky < s->kh; ++ky) {
        for (int64_t kx = 0; kx < s->kw; ++kx) {
            uint8_t *dst = data + (ky * s->kw + kx) * per_tap * QG_NP * 4;
            const uint8_t *src[QG_NP];
            for (int jj = 0; jj < QG_NP; ++jj) {
                const int64_t iy = y0[jj] + ky * s->dh, ix = x0[jj] + kx * s->dw;
                src[jj] = iy >= 0 && iy < s->h && ix >= 0 && ix < s->w
                              ? image + (iy * s->w + ix) * pixel
                              : j->pattern;
            }
            int64_t c = 0;
#if defined(__SSE2__)
            /* 4 pixels x 16 channels at a time: a 4 x 4 transpose of 4-channel groups */
            for (; c < wide; c += 16) {
                for (int jj = 0; jj < QG_NP; jj += 4) {
                    const __m128i a0 = _mm_loadu_si128((const __m128i *)(src[jj] + c));
                    const __m128i a1 = _mm_loadu_si128((const __m128i *)(src[jj + 1] + c));
                    const __m128i a2 = _mm_loadu_si128((const __m128i *)(src[jj + 2] + c));
                    const __m128i a3 = _mm_loadu_si128((const __m128i *)(src[jj + 3] + c));
                    const __m128i t0 = _mm_unpacklo_epi32(a0, a1), t1 = _mm_unpacklo_epi32(a2, a3);
                    const __m128i t2 = _mm_unpackhi_epi32(a0, a1), t3 = _mm_unpackhi_epi32(a2, a3);
                    uint8_t *out = dst + (c / 4 * QG_NP + jj) * 4;
                    _mm_storeu_si128((__m128i *)out, _mm_unpacklo_epi64(t0, t1));
                    _mm_storeu_si128((__m128i *)(out + QG_NP * 4), _mm_unpackhi_epi64(t0, t1));
                    _mm_storeu_si128((__m128i *)(out + 2 * QG_NP * 4), _mm_unpacklo_epi64(t2, t3));
                    _mm_storeu_si128((__m128i *)(out + 3 * QG_NP * 4), _mm_unpackhi_epi64(t2, t3));
                }
            }
#endif
            for (; c < d->c4; c += 4)
                for (int jj = 0; jj < QG_NP; ++jj)
                    memcpy(dst + (c / 4 * QG_NP + jj) * 4, src[jj] + c, 4);
        }
    }
    j->sums(kgroups(d->k), panel);
}

/* The same panel of a pointwise conv, from the input itself: k step g is 4 channels' planes
 * at the panel's pixels, interleaved (channels past the group's, and pixels past the plane,
 * zero). */
static void pointwise_panel(const struct conv_job *j, const uint8_t *x, int64_t img, int64_t g,
                            int64_t p0, uint8_t flip, uint8_t *panel) {
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t cg = j->d.cg, plane = j->d.pixels, kg = kgroups(j->d.k);
    const int64_t count = relvm_min64(QG_NP, plane - p0);
    const uint8_t *planes = x + (img * s->c + g * cg) * plane + p0;
    uint8_t *data = panel + QG_HEAD;
    for (int64_t q = 0; q < kg; ++q) {
        uint8_t *out = data + q * QG_NP * 4;
#if defined(__SSE2__)
        const __m128i flips = _mm_set1_epi8((char)flip);
        __m128i r[4];
        for (int i = 0; i < 4; ++i) {
            const int64_t ch = 4 * q + i;
            if (ch < cg && count == QG_NP) {
                r[i] = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(planes + ch * plane)),
                                     flips);
            } else { /* past the group's channels, or the plane's last panel */
                uint8_t row[QG_NP] = {0};
                for (int64_t jj = 0; ch < cg && jj < count; ++jj)
                    row[jj] = planes[ch * plane + jj] ^ flip;
                r[i] = _mm_loadu_si128((const __m128i *)row);
            }
        }
        const __m128i r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
        const __m128i lo01 = _mm_unpacklo_epi8(r0, r1), hi01 = _mm_unpackhi_epi8(r0, r1);
        const __m128i lo23 = _mm_unpacklo_epi8(r2, r3), hi23 = _mm_unpackhi_epi8(r2, r3);
        _mm_storeu_si128((__m128i *)out, _mm_unpacklo_epi16(lo01, lo23));
        _mm_storeu_si128((__m128i *)(out + 16), _mm_unpackhi_epi16(lo01, lo23));
        _mm_storeu_si128((__m128i *)(out + 32), _mm_unpacklo_epi16(hi01, hi23));
        _mm_storeu_si128((__m128i *)(out + 48), _mm_unpackhi_epi16(hi01, hi23));
#else
        for (int i = 0; i < 4; ++i) {
            const int64_t ch = 4 * q + i;
            for (int jj = 0; jj < QG_NP; ++jj)
                out[jj * 4 + i] = ch < cg && jj < count ? planes[ch * plane + jj] ^ flip : 0;
        }
#endif
    }
    j->sums(kg, panel);
}

static void conv_tasks(void *ctx, int64_t begin, int64_t end) {
    const struct conv_job *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const struct conv_dims *d = &j->d;
    const int64_t ps = panel_bytes(d->k);
    const int64_t wide = j->widen ? wide_bytes(d->k) : 0;
    uint8_t *panels = (uint8_t *)relvm_scratch_floats((size_t)((j->chunk * ps + wide) / 4));
    if (!panels) {
        atomic_store(j->failed, 1);
        return;
    }
    for (int64_t t = begin; t < end; ++t) {
        const int64_t img = t / (s->groups * j->chunks), g = t / j->chunks % s->groups;
        const int64_t q0 = t % j->chunks * j->chunk, q1 = relvm_min64(j->panels, q0 + j->chunk);
        for (int64_t q = q0; q < q1; ++q) {
            if (j->direct)
                pointwise_panel(j, j->direct, img, g, q * QG_NP, j->flip, panels + (q - q0) * ps);
            else
                unroll_panel(j, img, g, q * QG_NP, panels + (q - q0) * ps);
        }
        for (int64_t blk = 0; blk < d->blocks; ++blk) {
            const int64_t oc0 = g * d->ocg + blk * QG_MR;
            const int rows = (int)relvm_min64(QG_MR, d->ocg - blk * QG_MR);
            int32_t za[QG_MR];
            for (int r = 0; r < rows; ++r) za[r] = j->za[j->za_step * (oc0 + r)];
            const uint8_t *block = j->packed_w + g * d->group_bytes + blk * block_bytes(d->k);
            if (j->widen) { /* (after the chunk's panels in the scratch) */
                j->widen(kgroups(d->k), block, panels + j->chunk * ps);
                block = panels + j->chunk * ps;
            }
            int32_t *y = j->y + (img * s->oc + oc0) * d->pixels + q0 * QG_NP;
            /* every tile reads the same zero point: zb is its QG_NV panels' worth */
            for (int64_t q = q0; q < q1; q += QG_NV) {
                const int nv = (int)relvm_min64(QG_NV, q1 - q);
                const int cols = (int)relvm_min64(nv * QG_NP, d->pixels - q * QG_NP);
                j->tile(rows, nv, kgroups(d->k), block, panels + (q - q0) * ps, ps, cols, za,
                        j->zb, (uint32_t)d->k_real, y + (q - q0) * QG_NP, d->pixels);
            }
        }
    }
}

/* A depthwise conv, directly: plane t (image t / oc, output channel t % oc). */
struct dw_job {
    const struct relvm_conv2d_shape *s;
    int x_dtype, w_dtype;
    const uint8_t *x, *w;
    int32_t zx;
    const void *w_zero_point;
    int64_t w_zp_count;
    int32_t *y;
};

/* acc[i] += (x[i * stride] - zx) * w for i < n, in uint32 (wrapping as int32 sums do); a
 * vector loop for stride 1. */
static RELVM_VECTORIZE void dw_tap_u8(uint32_t *restrict acc, const u8 *restrict x, int64_t n,
                                      int32_t zx, int32_t w) {
    for (int64_t i = 0; i < n; ++i) acc[i] += (uint32_t)((x[i] - zx) * w);
}

static RELVM_VECTORIZE void dw_tap_i8(uint32_t *restrict acc, const i8 *restrict x, int64_t n,
                                      int32_t zx, int32_t w) {
    for (int64_t i = 0; i < n; ++i) acc[i] += (uint32_t)((x[i] - zx) * w);
}

/* acc[i] += (a[i] - zx) w0 + (b[i] - zx) w1 + (c[i] - zx) w2 for i < n: a row of 3 taps in
 * one pass (`zw` = zx (w0 + w1 + w2)); each sum fits in 18 bits. */
static RELVM_VECTORIZE void dw_taps3_u8(uint32_t *restrict acc, const u8 *restrict a,
                                        const u8 *restrict b, const u8 *restrict c, int64_t n,
                                        int32_t w0, int32_t w1, int32_t w2, int32_t zw) {
    for (int64_t i = 0; i < n; ++i) acc[i] += (uint32_t)(a[i] * w0 + b[i] * w1 + c[i] * w2 - zw);
}

static RELVM_VECTORIZE void dw_taps3_i8(uint32_t *restrict acc, const i8 *restrict a,
                                        const i8 *restrict b, const i8 *restrict c, int64_t n,
                                        int32_t w0, int32_t w1, int32_t w2, int32_t zw) {
    for (int64_t i = 0; i < n; ++i) acc[i] += (uint32_t)(a[i] * w0 + b[i] * w1 + c[i] * w2 - zw);
}

static void dw_tap(int is_signed, uint32_t *acc, const uint8_t *x, int64_t n, int64_t stride,
                   int32_t zx, int32_t w) {
    if (stride == 1 && is_signed) {
        dw_tap_i8(acc, (const i8 *)x, n, zx, w);
    } else if (stride == 1) {
        dw_tap_u8(acc, x, n, zx, w);
    } else if (is_signed) {
        const i8 *xs = (const i8 *)x;
        for (int64_t i = 0; i < n; ++i) acc[i] += (uint32_t)((xs[i * stride] - zx) * w);
    } else {
        for (int64_t i = 0; i < n; ++i) acc[i] += (uint32_t)((x[i * stride] - zx) * w);
    }
}

/* The output columns whose tap kx reads inside a row: [lo, hi), ix = ox * sw + off. */
struct dw_columns {
    int64_t off, lo, hi;
};

static struct dw_columns dw_columns(const struct relvm_conv2d_shape *s, int64_t kx) {
    struct dw_columns c;
    c.off = kx * s->dw - s->pl;
    c.lo = c.off >= 0 ? 0 : ceil_div(-c.off, s->sw);
    c.hi = relvm_min64(s->ow, s->w - c.off > 0 ? ceil_div(s->w - c.off, s->sw) : 0);
    return c;
}

/* One row of a depthwise conv's 3 taps along w (stride 1): the columns where all three read
 * inside in one pass, each tap alone at the borders. */
static void dw_row3(int is_signed, uint32_t *sums, const uint8_t *row, const struct dw_columns *c,
                    int64_t both_lo, int64_t both_hi, const int32_t *wv, int32_t zx) {
    if (both_lo < both_hi) {
        const int64_t n = both_hi - both_lo;
        const uint8_t *x0 = row + both_lo + c[0].off, *x1 = row + both_lo + c[1].off;
        const uint8_t *x2 = row + both_lo + c[2].off;
        const int32_t bias = zx * (wv[0] + wv[1] + wv[2]);
        if (is_signed)
            dw_taps3_i8(sums + both_lo, (const i8 *)x0, (const i8 *)x1, (const i8 *)x2, n,
                        wv[0], wv[1], wv[2], bias);
        else
            dw_taps3_u8(sums + both_lo, x0, x1, x2, n, wv[0], wv[1], wv[2], bias);
    } else {
        both_lo = both_hi = 0; /* no common part: each tap over all its columns */
    }
    for (int kx = 0; kx < 3; ++kx) {
        const int64_t ends[2][2] = {{c[kx].lo, relvm_min64(c[kx].hi, both_lo)},
                                    {relvm_max64(c[kx].lo, both_hi), c[kx].hi}};
        for (int part = 0; part < 2; ++part) {
            const int64_t l = ends[part][0], u = ends[part][1];
            if (l < u) dw_tap(is_signed, sums + l, row + l + c[kx].off, u - l, 1, zx, wv[kx]);
        }
    }
}

static void dw_planes(void *ctx, int64_t begin, int64_t end) {
    const struct dw_job *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t taps = s->kh * s->kw, per_group = s->oc / s->groups;
    const int64_t ow = s->ow, sw = s->sw, w = s->w, h = s->h;
    const int is_signed = j->x_dtype == RELVM_INT8, rows3 = s->kw == 3 && sw == 1;
    /* a row of 3 taps: each tap's columns, and where all three read inside */
    struct dw_columns c3[3];
    int64_t both_lo = 0, both_hi = ow;
    for (int kx = 0; rows3 && kx < 3; ++kx) {
        c3[kx] = dw_columns(s, kx);
        both_lo = relvm_max64(both_lo, c3[kx].lo);
        both_hi = relvm_min64(both_hi, c3[kx].hi);
    }
    for (int64_t t = begin; t < end; ++t) {
        const int64_t img = t / s->oc, oc = t % s->oc, ch = oc / per_group;
        const int32_t zw = zp_at(j->w_dtype, j->w_zero_point, j->w_zp_count == 1 ? 0 : oc);
        const uint8_t *plane = j->x + (img * s->c + ch) * h * w;
        uint32_t *out = (uint32_t *)j->y + t * s->oh * ow; /* the sums, in place */
        memset(out, 0, (size_t)(s->oh * ow) * sizeof *out);
        for (int64_t oy = 0; oy < s->oh; ++oy) { /* a row of sums, in L1 over its taps */
            for (int64_t ky = 0; ky < s->kh; ++ky) {
                const int64_t iy = oy * s->sh - s->pt + ky * s->dh;
                if (iy < 0 || iy >= h) continue; /* padding: x's zero point, adds nothing */
                const uint8_t *row = plane + iy * w;
                uint32_t *sums = out + oy * ow;
                const int64_t tap0 = oc * taps + ky * s->kw;
                if (rows3) {
                    const int32_t wv[3] = {zp_at(j->w_dtype, j->w, tap0) - zw,
                                           zp_at(j->w_dtype, j->w, tap0 + 1) - zw,
                                           zp_at(j->w_dtype, j->w, tap0 + 2) - zw};
                    dw_row3(is_signed, sums, row, c3, both_lo, both_hi, wv, j->zx);
                    continue;
                }
                for (int64_t kx = 0; kx < s->kw; ++kx) {
                    const struct dw_columns c = dw_columns(s, kx);
                    const int32_t v = zp_at(j->w_dtype, j->w, tap0 + kx) - zw;
                    if (v != 0 && c.lo < c.hi)
                        dw_tap(is_signed, sums + c.lo, row + c.lo * sw + c.off, c.hi - c.lo, sw,
                               j->zx, v);
                }
            }
        }
    }
}

RELVM_EXPORT int relvm_conv2d_integer(const struct relvm_conv2d_shape *s, int x_dtype,
                                      int w_dtype, const void *x, const void *w,
                                      const void *packed_w, const void *x_zero_point,
                                      const void *w_zero_point, int64_t w_zp_count,
                                      void *y) {
    if (!quantized(x_dtype) || !quantized(w_dtype) || s->groups < 1 || s->c % s->groups ||
        s->oc % s->groups || (w_zp_count != 1 && w_zp_count != s->oc) || s->n < 0 ||
        s->oh < 0 || s->ow < 0)
        return RELVM_UNSUPPORTED;
    const int64_t outputs = s->n * s->oc * s->oh * s->ow;
    if (outputs == 0) return RELVM_OK;
    if (depthwise(s)) {
        struct dw_job job = {s, x_dtype, w_dtype, x, w, zp_at(x_dtype, x_zero_point, 0),
                             w_zero_point, w_zp_count, y};
        const int64_t work = s->oh * s->ow * s->kh * s->kw;
        relvm_parallel_for(s->n * s->oc, relvm_max64(1, RELVM_GRAIN / relvm_max64(1, work)),
                           dw_planes, &job);
        return RELVM_OK;
    }
    qg_tile_fn *tile;
    qg_sums_fn *sums;
    qg_widen_fn *widen;
    chosen(&tile, &sums, &widen);
    const struct conv_dims d = conv_dims(s);
    const int64_t panels = ceil_div(d.pixels, QG_NP), ps = panel_bytes(d.k);
    /* Chunks of panels about 96 KB (in L2 while every block of weights runs over them), and
     * enough tasks for the threads. */
    int64_t chunk = relvm_max64(1, relvm_min64(panels, (96 << 10) / ps));
    const int64_t per_image = s->n * s->groups;
    if (per_image * ceil_div(panels, chunk) < 4 * (int64_t)relvm_threads_get())
        chunk = relvm_max64(1, relvm_min64(chunk, ceil_div(panels * per_image,
                                                            4 * (int64_t)relvm_threads_get())));
    if (chunk > QG_NV) chunk = chunk / QG_NV * QG_NV;
    const int64_t copy_bytes = pointwise(s) ? 0 : s->n * s->h * s->w * s->groups * d.c4;
    uint8_t *copy = malloc((size_t)relvm_max64(1, copy_bytes) + (size_t)d.c4);
    const int64_t w_bytes = ceil_div(relvm_max64(1, s->groups * d.group_bytes), 64) * 64;
    uint8_t *own_w = packed_w ? NULL : aligned_alloc(64, (size_t)w_bytes);
    int32_t *za = malloc((size_t)w_zp_count * sizeof(int32_t));
    if (!copy || (!packed_w && !own_w) || !za) {
        free(copy);
        free(own_w);
        free(za);
        return RELVM_NO_MEMORY;
    }
    if (own_w) relvm_conv2d_integer_pack_weights(s, w_dtype, w, own_w);
    for (int64_t i = 0; i < w_zp_count; ++i) za[i] = a_zp(w_dtype, w_zero_point, i);
    int32_t zb[QG_NV * QG_NP];
    for (int i = 0; i < QG_NV * QG_NP; ++i) zb[i] = b_zp(x_dtype, x_zero_point, 0);
    /* What a tap reads in the padding: x's zero point, in each of a group's channels. */
    uint8_t *pattern = copy + copy_bytes;
    for (int64_t i = 0; i < d.c4; ++i)
        pattern[i] = i < d.cg ? (uint8_t)(((const uint8_t *)x_zero_point)[0] ^ b_flip(x_dtype)) : 0;
    if (!pointwise(s)) {
        const int64_t chunks = ceil_div(s->h * s->w, QG_COPY_PIXELS);
        struct nhwc_job nj = {s, d, b_flip(x_dtype), chunks, x, copy};
        relvm_parallel_for(s->n * chunks, relvm_max64(1, RELVM_GRAIN / (QG_COPY_PIXELS * s->c)),
                           nhwc_chunks, &nj);
    }
    atomic_int failed = 0;
    struct conv_job job = {s, d, tile, sums, widen, panels, chunk, ceil_div(panels, chunk),
                           copy, pattern, packed_w ? packed_w : own_w, za,
                           w_zp_count == 1 ? 0 : 1, zb, y, &failed, pointwise(s) ? x : NULL,
                           b_flip(x_dtype)};
    relvm_parallel_for(per_image * job.chunks, 1, conv_tasks, &job);
    free(copy);
    free(own_w);
    free(za);
    return atomic_load(&failed) ? RELVM_NO_MEMORY : RELVM_OK;
}
