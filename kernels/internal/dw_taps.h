/* The inner loop of conv_depthwise.c, written once and compiled once per instruction set:
 * conv_depthwise.c includes this file under `#pragma GCC target(...)` with
 *   DW_SUFFIX  a name suffix (avx512, avx2, base),
 *   DW_VW      floats per vector register (16, 8, 4).
 * DW_NAME(taps) computes `count` consecutive outputs of a plane laid out as a "wide grid"
 * (conv_depthwise.c): output t is the sum over taps of k[tap] * p[off[tap] + t], so every tap
 * reads DW_VW consecutive floats per vector whatever the window, stride or dilation.
 * Internal: not part of the cdef. */

#define DW_CAT2(a, b) a##_##b
#define DW_CAT(a, b) DW_CAT2(a, b)
#define DW_NAME(x) DW_CAT(x, DW_SUFFIX)

typedef float DW_NAME(vec) __attribute__((vector_size(DW_VW * 4)));
typedef float DW_NAME(uvec) __attribute__((vector_size(DW_VW * 4), aligned(4)));
typedef int32_t DW_NAME(mask) __attribute__((vector_size(DW_VW * 4)));

/* x in every lane (one broadcast). */
static inline __attribute__((always_inline)) DW_NAME(vec) DW_NAME(splat)(float x) {
    return __builtin_shuffle((DW_NAME(vec)){x}, (DW_NAME(mask)){0});
}

/* The epilogue's clamp: whether there is one, and its bounds in every lane. */
struct DW_NAME(clamp) {
    int on;
    DW_NAME(vec) lo, hi;
};

static inline __attribute__((always_inline)) struct DW_NAME(clamp) DW_NAME(clamp_of)(
    const float *clamp) {
    struct DW_NAME(clamp) c = {clamp != NULL, DW_NAME(splat)(clamp ? clamp[0] : 0.0f),
                               DW_NAME(splat)(clamp ? clamp[1] : 0.0f)};
    return c;
}

/* v clamped lane by lane, as the GEMM's epilogue does (pgemm_tile.h: lo where v < lo, then hi
 * where v > hi; NaN compares false and stays). */
static inline __attribute__((always_inline)) DW_NAME(vec) DW_NAME(clamped)(
    DW_NAME(vec) v, struct DW_NAME(clamp) c) {
    typedef DW_NAME(mask) mask;
    if (!c.on) return v;
    const mask below = v < c.lo;
    v = (DW_NAME(vec))(((mask)v & ~below) | ((mask)c.lo & below));
    const mask above = v > c.hi;
    return (DW_NAME(vec))(((mask)v & ~above) | ((mask)c.hi & above));
}

/* bias + the taps for the DW_VW outputs from t, clamped. */
static inline __attribute__((always_inline)) DW_NAME(vec) DW_NAME(one)(
    const float *p, const int64_t *off, const float *k, int64_t taps, float bias,
    struct DW_NAME(clamp) clamp, int64_t t) {
    typedef DW_NAME(vec) vec;
    vec acc = DW_NAME(splat)(bias);
    for (int64_t q = 0; q < taps; ++q)
        acc += DW_NAME(splat)(k[q]) * *(const DW_NAME(uvec) *)(p + off[q] + t);
    return DW_NAME(clamped)(acc, clamp);
}

/* Outputs t = 0 .. count - 1 into out; reads p up to the last tap's offset + count rounded up
 * to whole vectors (the caller's slack). A last, partial vector is stored as far as count.
 * With `hoist` (inlined for the common windows, `taps` a constant) the loop over taps unrolls
 * and each tap's weight stays in a register; else each weight is broadcast where it is used
 * (any window, no array the size of the window). */
static inline __attribute__((always_inline)) void DW_NAME(taps_of)(
    const float *p, const int64_t *off, const float *k, const int64_t taps, const int hoist,
    float bias, const float *clamp_at, float *out, int64_t count) {
    typedef DW_NAME(vec) vec;
    const struct DW_NAME(clamp) clamp = DW_NAME(clamp_of)(clamp_at);
    enum { U = 4 }; /* vectors computed together: independent chains hide the FMA latency */
    vec wv[hoist ? taps : 1];
    for (int64_t q = 0; hoist && q < taps; ++q) wv[q] = DW_NAME(splat)(k[q]);
    int64_t t = 0;
    for (; t + U * DW_VW <= count; t += U * DW_VW) {
        vec acc[U];
        for (int u = 0; u < U; ++u) acc[u] = DW_NAME(splat)(bias);
        for (int64_t q = 0; q < taps; ++q) {
            const vec w = hoist ? wv[q] : DW_NAME(splat)(k[q]);
            const float *from = p + off[q] + t;
            for (int u = 0; u < U; ++u)
                acc[u] += w * *(const DW_NAME(uvec) *)(from + u * DW_VW);
        }
        for (int u = 0; u < U; ++u)
            *(DW_NAME(uvec) *)(out + t + u * DW_VW) = DW_NAME(clamped)(acc[u], clamp);
    }
    for (; t + DW_VW <= count; t += DW_VW)
        *(DW_NAME(uvec) *)(out + t) = DW_NAME(one)(p, off, k, taps, bias, clamp, t);
    if (t < count) { /* the last, partial vector: computed whole, stored as far as count */
        float last[DW_VW];
        *(DW_NAME(uvec) *)last = DW_NAME(one)(p, off, k, taps, bias, clamp, t);
        for (int64_t i = 0; t + i < count; ++i) out[t + i] = last[i];
    }
}

static void DW_NAME(taps)(const float *p, const int64_t *off, const float *k, int64_t taps,
                          float bias, const float *clamp, float *out, int64_t count) {
    switch (taps) {
    case 9: DW_NAME(taps_of)(p, off, k, 9, 1, bias, clamp, out, count); break;
    case 25: DW_NAME(taps_of)(p, off, k, 25, 1, bias, clamp, out, count); break;
    case 3: DW_NAME(taps_of)(p, off, k, 3, 1, bias, clamp, out, count); break;
    case 49: DW_NAME(taps_of)(p, off, k, 49, 1, bias, clamp, out, count); break;
    default: DW_NAME(taps_of)(p, off, k, taps, 0, bias, clamp, out, count); break;
    }
}

/* The grid's rows (C floats apart) to y (ow apart), in order, in whole vectors: a row's last
 * vector may spill into the rows after it, which are copied over it, but not past the plane. */
static void DW_NAME(rows)(float *y, const float *grid, int64_t C, int64_t ow, int64_t oh) {
    for (int64_t oy = 0; oy < oh; ++oy) {
        const float *from = grid + oy * C;
        float *to = y + oy * ow;
        const int64_t room = (oh - oy) * ow; /* floats from `to` to the plane's end */
        int64_t t = 0;
        for (; t < ow && t + DW_VW <= room; t += DW_VW)
            *(DW_NAME(uvec) *)(to + t) = *(const DW_NAME(uvec) *)(from + t);
        for (; t < ow; ++t) to[t] = from[t];
    }
}

/* The channel-blocked form: DW_VW channels at once, each pixel one vector of them. p is the
 * block's padded input, pixel-major (DW_VW floats a pixel); output pixel (oy, ox) is
 * bias + the sum over taps of wv[tap] (the DW_VW channels' weights) * p[base + off[tap]], base
 * = oy * row_step + ox * col_step; out gets oh * ow pixels of DW_VW floats. Four pixels of a
 * row at a time. */
static inline __attribute__((always_inline)) void DW_NAME(pixels_of)(
    const float *p, const int64_t *off, const float *wv, const int64_t taps, const int hoist,
    const float *bias, const float *clamp_at, int64_t oh, int64_t ow, int64_t row_step,
    int64_t col_step, float *out) {
    typedef DW_NAME(vec) vec;
    const struct DW_NAME(clamp) clamp = DW_NAME(clamp_of)(clamp_at);
    enum { U = 4 };
    vec w[hoist ? taps : 1];
    for (int64_t q = 0; hoist && q < taps; ++q) w[q] = *(const DW_NAME(uvec) *)(wv + q * DW_VW);
    const vec b = *(const DW_NAME(uvec) *)bias;
    for (int64_t oy = 0; oy < oh; ++oy) {
        const float *row = p + oy * row_step;
        float *o = out + oy * ow * DW_VW;
        int64_t ox = 0;
        for (; ox + U <= ow; ox += U) {
            vec acc[U];
            for (int u = 0; u < U; ++u) acc[u] = b;
            for (int64_t q = 0; q < taps; ++q) {
                const vec wq = hoist ? w[q] : *(const DW_NAME(uvec) *)(wv + q * DW_VW);
                const float *from = row + ox * col_step + off[q];
                for (int u = 0; u < U; ++u)
                    acc[u] += wq * *(const DW_NAME(uvec) *)(from + u * col_step);
            }
            for (int u = 0; u < U; ++u)
                *(DW_NAME(uvec) *)(o + (ox + u) * DW_VW) = DW_NAME(clamped)(acc[u], clamp);
        }
        for (; ox < ow; ++ox) {
            vec acc = b;
            for (int64_t q = 0; q < taps; ++q) {
                const vec wq = hoist ? w[q] : *(const DW_NAME(uvec) *)(wv + q * DW_VW);
                acc += wq * *(const DW_NAME(uvec) *)(row + ox * col_step + off[q]);
            }
            *(DW_NAME(uvec) *)(o + ox * DW_VW) = DW_NAME(clamped)(acc, clamp);
        }
    }
}

static void DW_NAME(pixels)(const float *p, const int64_t *off, const float *wv, int64_t taps,
                            const float *bias, const float *clamp, int64_t oh, int64_t ow,
                            int64_t row_step, int64_t col_step, float *out) {
    switch (taps) {
    case 9: DW_NAME(pixels_of)(p, off, wv, 9, 1, bias, clamp, oh, ow, row_step, col_step, out);
        break;
    case 25: DW_NAME(pixels_of)(p, off, wv, 25, 1, bias, clamp, oh, ow, row_step, col_step, out);
        break;
    default: DW_NAME(pixels_of)(p, off, wv, taps, 0, bias, clamp, oh, ow, row_step, col_step, out);
        break;
    }
}

#undef DW_CAT2
#undef DW_CAT
#undef DW_NAME
