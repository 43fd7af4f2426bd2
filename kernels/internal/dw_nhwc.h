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

/* Output pixels [0, count) of one output row into out (C floats a pixel): pixel q's taps are
 * the `nt[q]` pairs (in[q][t], wt[q][t]) -- the input pixel the tap reads (C floats) and the
 * tap's weights (C floats); taps that read padding are left out. C >= DWN_VW: the last vector
 * of a pixel starts at C - DWN_VW, recomputing a few channels of the one before it (the same
 * values) rather than running a partial vector. */
static void DWN_NAME(pixels)(int64_t count, const int64_t *nt, const float *const *in,
                             const float *const *wt, int64_t taps, int64_t C,
                             const float *bias, const float *clamp_at, float *out) {
    typedef DWN_NAME(vec) vec;
    typedef DWN_NAME(uvec) uvec;
    const int clamp = clamp_at != NULL;
    const vec lo = DWN_NAME(splat)(clamp ? clamp_at[0] : 0.0f);
    const vec hi = DWN_NAME(splat)(clamp ? clamp_at[1] : 0.0f);
    for (int64_t q = 0; q < count; ++q) {
        const float *const *pin = in + q * taps;
        const float *const *pw = wt + q * taps;
        const int64_t n = nt[q];
        float *o = out + q * C;
        for (int64_t c0 = 0; c0 < C; c0 += DWN_VW) {
            const int64_t c = c0 + DWN_VW <= C ? c0 : C - DWN_VW;
            /* two chains of multiply-adds, so one waits out the other's latency */
            vec acc0 = bias ? *(const uvec *)(bias + c) : (vec){0}, acc1 = (vec){0};
            int64_t t = 0;
            for (; t + 2 <= n; t += 2) {
                acc0 += *(const uvec *)(pw[t] + c) * *(const uvec *)(pin[t] + c);
                acc1 += *(const uvec *)(pw[t + 1] + c) * *(const uvec *)(pin[t + 1] + c);
            }
            if (t < n) acc0 += *(const uvec *)(pw[t] + c) * *(const uvec *)(pin[t] + c);
            vec v = acc0 + acc1;
            if (clamp) v = DWN_NAME(clamped)(v, lo, hi);
            *(uvec *)(o + c) = v;
        }
    }
}

/* Output pixels [0, count) of a row whose taps all read inside the image (the window's rows
 * that do, at the top or bottom of the image): pixel q's tap t
 * reads p + q * step + off[t] (C floats), its weights wt + t * C. A vector of channels at a
 * time, its taps' weights held in registers (`hoist`, inlined for the common windows) over the
 * row's pixels, four pixels at once. */
static inline __attribute__((always_inline)) void DWN_NAME(inner_of)(
    int64_t count, const float *p, int64_t step, const int64_t *off, const float *wt,
    const int64_t taps, const int hoist, int64_t C, const float *bias, const float *clamp_at,
    float *out) {
    typedef DWN_NAME(vec) vec;
    typedef DWN_NAME(uvec) uvec;
    const int clamp = clamp_at != NULL;
    const vec lo = DWN_NAME(splat)(clamp ? clamp_at[0] : 0.0f);
    const vec hi = DWN_NAME(splat)(clamp ? clamp_at[1] : 0.0f);
    enum { U = 4 };
    for (int64_t c0 = 0; c0 < C; c0 += DWN_VW) {
        const int64_t c = c0 + DWN_VW <= C ? c0 : C - DWN_VW;
        vec w[hoist ? taps : 1];
        for (int64_t t = 0; hoist && t < taps; ++t) w[t] = *(const uvec *)(wt + t * C + c);
        const vec b = bias ? *(const uvec *)(bias + c) : (vec){0};
        const float *pc = p + c;
        float *oc = out + c;
        int64_t q = 0;
        for (; q + U <= count; q += U) {
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
        for (; q < count; ++q) {
            vec acc = b;
            for (int64_t t = 0; t < taps; ++t) {
                const vec wq = hoist ? w[t] : *(const uvec *)(wt + t * C + c);
                acc += wq * *(const uvec *)(pc + q * step + off[t]);
            }
            *(uvec *)(oc + q * C) = clamp ? DWN_NAME(clamped)(acc, lo, hi) : acc;
        }
    }
}

static void DWN_NAME(inner)(int64_t count, const float *p, int64_t step, const int64_t *off,
                            const float *wt, int64_t taps, int64_t C, const float *bias,
                            const float *clamp, float *out) {
    switch (taps) {
    case 9: DWN_NAME(inner_of)(count, p, step, off, wt, 9, 1, C, bias, clamp, out); break;
    case 25: DWN_NAME(inner_of)(count, p, step, off, wt, 25, 1, C, bias, clamp, out); break;
    /* a 3x3 or 5x5 window's rows at the top or bottom of the image: one or two rows out */
    case 6: DWN_NAME(inner_of)(count, p, step, off, wt, 6, 1, C, bias, clamp, out); break;
    case 15: DWN_NAME(inner_of)(count, p, step, off, wt, 15, 1, C, bias, clamp, out); break;
    case 20: DWN_NAME(inner_of)(count, p, step, off, wt, 20, 1, C, bias, clamp, out); break;
    default: DWN_NAME(inner_of)(count, p, step, off, wt, taps, 0, C, bias, clamp, out); break;
    }
}

#undef DWN_CAT2
#undef DWN_CAT
#undef DWN_NAME
