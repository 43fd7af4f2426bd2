/* The inner loop of conv_nhwc.c's depthwise form, written once and compiled once per
 * instruction set: conv_nhwc.c includes this file under `#pragma GCC target(...)` with
 *   DWN_SUFFIX  a name suffix (avx512, avx2, base),
 *   DWN_VW      floats per vector register (16, 8, 4).
 * Channels are the fastest axis of NHWC data, so each output pixel is a run of C floats
 * computed a vector of channels at a time: bias + the sum over its taps of the tap's weights
 * (a vector of C, the weights packed tap-major) times the input pixel the tap reads.
 * Internal: not part of the cdef. */

#define DWN_CAT2(a, b) a##_##b
#define DWN_CAT(a, b) DWN_CAT2(a, b)
#define DWN_NAME(x) DWN_CAT(x, DWN_SUFFIX)

typedef float DWN_NAME(vec) __attribute__((vector_size(DWN_VW * 4)));
typedef float DWN_NAME(uvec) __attribute__((vector_size(DWN_VW * 4), aligned(4)));
typedef int32_t DWN_NAME(mask) __attribute__((vector_size(DWN_VW * 4)));

/* x in every lane. */
static inline __attribute__((always_inline)) DWN_NAME(vec) DWN_NAME(splat)(float x) {
    return __builtin_shuffle((DWN_NAME(vec)){x}, (DWN_NAME(mask)){0});
}

/* v clamped to [lo, hi] lane by lane as the GEMM's epilogue does (pgemm_tile.h: lo where
 * v < lo, then hi where v > hi; NaN compares false and stays). */
static inline __attribute__((always_inline)) DWN_NAME(vec) DWN_NAME(clamped)(
    DWN_NAME(vec) v, DWN_NAME(vec) lo, DWN_NAME(vec) hi) {
    typedef DWN_NAME(mask) mask;
    const mask below = v < lo;
    v = (DWN_NAME(vec))(((mask)v & ~below) | ((mask)lo & below));
    const mask above = v > hi;
    return (DWN_NAME(vec))(((mask)v & ~above) | ((mask)hi & above));
}

/* One to three output pixels with the same taps: pixel q's tap t reads p + q * step + off[t]
 * (C floats), its weights wt + woff[t] (C floats). A pixel or two alone give one or two chains
 * of multiply-adds over the taps a vector of channels at a time, each waiting out the FMA's
 * latency (a 5x5 window on a 7 x 7 plane, most of whose pixels are at a border, ran at a
 * third of the FMA's rate): so G pixels x CB vectors of channels at once, G * CB >= 4 chains,
 * the weights read once a tap for the G pixels. The channels past the last whole block a
 * vector at a time, the taps' sums in two chains, the last vector starting at C - DWN_VW
 * (a few channels of the one before computed again, the same values). */
static inline __attribute__((always_inline)) void DWN_NAME(few_of)(
    const int G, const int CB, const float *p, int64_t step, const int64_t *off,
    const int64_t *woff, const float *wt, int64_t taps, int64_t C, const float *bias,
    const int clamp, DWN_NAME(vec) lo, DWN_NAME(vec) hi, float *out) {
    typedef DWN_NAME(vec) vec;
    typedef DWN_NAME(uvec) uvec;
    int64_t c = 0;
    for (; c + CB * DWN_VW <= C; c += CB * DWN_VW) {
        vec acc[G][CB];
#pragma GCC unroll 4
        for (int b = 0; b < CB; ++b) {
            const vec v = bias ? *(const uvec *)(bias + c + b * DWN_VW) : (vec){0};
#pragma GCC unroll 4
            for (int g = 0; g < G; ++g) acc[g][b] = v;
        }
        for (int64_t t = 0; t < taps; ++t) {
            const float *w = wt + woff[t] + c, *x = p + off[t] + c;
#pragma GCC unroll 4
            for (int b = 0; b < CB; ++b) {
                const vec wv = *(const uvec *)(w + b * DWN_VW);
#pragma GCC unroll 4
                for (int g = 0; g < G; ++g)
                    acc[g][b] += wv * *(const uvec *)(x + g * step + b * DWN_VW);
            }
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
            for (int b = 0; b < CB; ++b)
                *(uvec *)(out + g * C + c + b * DWN_VW) =
                    clamp ? DWN_NAME(clamped)(acc[g][b], lo, hi) : acc[g][b];
    }
    for (; c < C; c += DWN_VW) {
        const int64_t cc = c + DWN_VW <= C ? c : C - DWN_VW;
        vec acc[G][2];
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) {
            acc[g][0] = bias ? *(const uvec *)(bias + cc) : (vec){0};
            acc[g][1] = (vec){0};
        }
        int64_t t = 0;
        for (; t + 2 <= taps; t += 2)
#pragma GCC unroll 2
            for (int u = 0; u < 2; ++u) {
                const vec wv = *(const uvec *)(wt + woff[t + u] + cc);
#pragma GCC unroll 4
                for (int g = 0; g < G; ++g)
                    acc[g][u] += wv * *(const uvec *)(p + off[t + u] + g * step + cc);
            }
        if (t < taps) {
            const vec wv = *(const uvec *)(wt + woff[t] + cc);
#pragma GCC unroll 4
            for (int g = 0; g < G; ++g)
                acc[g][0] += wv * *(const uvec *)(p + off[t] + g * step + cc);
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) {
            const vec v = acc[g][0] + acc[g][1];
            *(uvec *)(out + g * C + cc) = clamp ? DWN_NAME(clamped)(v, lo, hi) : v;
        }
    }
}

/* few_of for `count` (1 to 3) pixels (C >= DWN_VW; clamp_at: NULL, or the clamp's bounds). */
static void DWN_NAME(few)(int64_t count, const float *p, int64_t step, const int64_t *off,
                          const int64_t *woff, const float *wt, int64_t taps, int64_t C,
                          const float *bias, const float *clamp_at, float *out) {
    const int clamp = clamp_at != NULL;
    const DWN_NAME(vec) lo = DWN_NAME(splat)(clamp ? clamp_at[0] : 0.0f);
    const DWN_NAME(vec) hi = DWN_NAME(splat)(clamp ? clamp_at[1] : 0.0f);
    switch (count) {
    case 1: DWN_NAME(few_of)(1, 4, p, step, off, woff, wt, taps, C, bias, clamp, lo, hi, out); break;
    case 2: DWN_NAME(few_of)(2, 2, p, step, off, woff, wt, taps, C, bias, clamp, lo, hi, out); break;
    case 3: DWN_NAME(few_of)(3, 2, p, step, off, woff, wt, taps, C, bias, clamp, lo, hi, out); break;
    default: break;
    }
}

/* Output pixels [0, count) of a row whose taps all read inside the image (the window's rows
 * that do, at the top or bottom of the image): pixel q's tap t reads p + q * step + off[t]
 * (C floats), its weights wt + t * C (= wt + woff[t]). A vector of channels at a time, its
 * taps' weights held in registers (`hoist`, inlined for the common windows) over the row's
 * pixels, four pixels at once; the last one to three pixels through few. */
static inline __attribute__((always_inline)) void DWN_NAME(inner_of)(
    int64_t count, const float *p, int64_t step, const int64_t *off, const int64_t *woff,
    const float *wt, const int64_t taps, const int hoist, int64_t C, const float *bias,
    const float *clamp_at, float *out) {
    typedef DWN_NAME(vec) vec;
    typedef DWN_NAME(uvec) uvec;
    const int clamp = clamp_at != NULL;
    const vec lo = DWN_NAME(splat)(clamp ? clamp_at[0] : 0.0f);
    const vec hi = DWN_NAME(splat)(clamp ? clamp_at[1] : 0.0f);
    enum { U = 4 };
    for (int64_t c0 = 0; count >= U && c0 < C; c0 += DWN_VW) {
        const int64_t c = c0 + DWN_VW <= C ? c0 : C - DWN_VW;
        vec w[hoist ? taps : 1];
        for (int64_t t = 0; hoist && t < taps; ++t) w[t] = *(const uvec *)(wt + t * C + c);
        const vec b = bias ? *(const uvec *)(bias + c) : (vec){0};
        const float *pc = p + c;
        float *oc = out + c;
        for (int64_t q = 0; q + U <= count; q += U) {
            vec acc[U];
            for (int u = 0; u < U; ++u) acc[u] = b;
            for (int64_t t = 0; t < taps; ++t) {
                const vec wq = hoist ? w[t] : *(const uvec *)(wt + t * C + c);
                const float *from = pc + q * step + off[t];
                for (int u = 0; u < U; ++u) acc[u] += wq * *(const uvec *)(from + u * step);
            }
            for (int u = 0; u < U; ++u)
                *(uvec *)(oc + (q + u) * C) = clamp ? DWN_NAME(clamped)(acc[u], lo, hi) : acc[u];
        }
    }
    const int64_t q = count / U * U; /* the last one to three pixels: several vectors at once */
    if (q < count)
        DWN_NAME(few)(count - q, p + q * step, step, off, woff, wt, taps, C, bias, clamp_at,
                      out + q * C);
}

static void DWN_NAME(inner)(int64_t count, const float *p, int64_t step, const int64_t *off,
                            const int64_t *woff, const float *wt, int64_t taps, int64_t C,
                            const float *bias, const float *clamp, float *out) {
    switch (taps) {
    case 9: DWN_NAME(inner_of)(count, p, step, off, woff, wt, 9, 1, C, bias, clamp, out); break;
    case 25: DWN_NAME(inner_of)(count, p, step, off, woff, wt, 25, 1, C, bias, clamp, out); break;
    /* a 3x3 or 5x5 window's rows at the top or bottom of the image: one or two rows out */
    case 6: DWN_NAME(inner_of)(count, p, step, off, woff, wt, 6, 1, C, bias, clamp, out); break;
    case 15: DWN_NAME(inner_of)(count, p, step, off, woff, wt, 15, 1, C, bias, clamp, out); break;
    case 20: DWN_NAME(inner_of)(count, p, step, off, woff, wt, 20, 1, C, bias, clamp, out); break;
    default: DWN_NAME(inner_of)(count, p, step, off, woff, wt, taps, 0, C, bias, clamp, out); break;
    }
}

#undef DWN_CAT2
#undef DWN_CAT
#undef DWN_NAME
