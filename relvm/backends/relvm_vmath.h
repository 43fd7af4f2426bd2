/* float32 exp, tanh, erf and the logistic function written so GCC vectorizes loops that call
 * them (glibc's scalar versions stop vectorization). Branch-free: clamps and selects only; NaN
 * passes through. Quotients are divisions: a vector divide runs beside the FMA pipes, and the
 * three Newton steps that once replaced it (7 operations on the FMA pipes, 28 cycles of
 * latency) made the logistic function 1.4x and GELU 1.2x slower on AMD Zen 4 (AVX-512 and
 * AVX2), the AVX2 logistic 1.9x. Accuracy against float64 (tests/kernels checks it): exp within
 * 1 ulp, tanh, erf and the logistic function within 4e-7 relative, where the op semantics ask
 * for 1e-5.
 *
 * One definition for both kinds of C relvm runs: the kernel library (kernels/internal/vmath.h
 * includes it) and the fused kernels generated from a model's steps (relvm/backends/fusedgen.py
 * puts this text in their prelude; it is package data so the runtime can generate them again). */
#ifndef RELVM_VMATH_F32_H
#define RELVM_VMATH_F32_H
#include <stdint.h>
#include <string.h>

static inline float vm_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t vm_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* 2^n for n in [-126, 127], built in the exponent field. */
static inline float vm_pow2i(int32_t n) { return vm_from_bits((uint32_t)(n + 127) << 23); }

/* exp's argument reduction: x = n ln2 + r with |r| <= ln2/2, r found in two steps
 * (Cody-Waite). Returns r and sets *n. */
static inline float vm_exp_reduce(float x, int32_t *n) {
    /* Adding 1.5 * 2^23 rounds x * log2(e) to an integer held in the low mantissa bits. */
    const float shifter = 12582912.0f;
    const float t = x * 1.44269504088896341f + shifter;
    const float fn = t - shifter;
    *n = (int32_t)(vm_to_bits(t) - vm_to_bits(shifter));
    const float r = x - fn * 0.693359375f;
    return r - fn * -2.12194440e-4f;
}

/* Cephes' expf: exp(x) = 2^n exp(r) (vm_exp_reduce). Returns exp(r) and sets *n. */
static inline float vm_exp_parts(float x, int32_t *n) {
    const float r = vm_exp_reduce(x, n);
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    return p * r * r + r + 1.0f;
}

static inline float vm_expf(float x) {
    /* Past these, exp is inf or 0 anyway; the clamp keeps n in [-150, 128]. */
    x = x > 88.8f ? 88.8f : x;
    x = x < -104.0f ? -104.0f : x;
    int32_t n;
    const float e = vm_exp_parts(x, &n);
    /* Two factors, so 2^128 (overflow to inf) and 2^-150 (gradual underflow) both work. */
    const int32_t half = n / 2;
    return e * vm_pow2i(half) * vm_pow2i(n - half);
}

/* Rational minimax approximation on [-7.9, 7.9] (Eigen's); tanh is +-1 in float32 beyond. */
static inline float vm_tanhf(float x) {
    const float c = 7.90531110763549805f;
    const float tiny = 0.0004f; /* below this tanh(x) rounds to x */
    const float y = x > c ? c : (x < -c ? -c : x);
    const float y2 = y * y;
    float p = -2.76076847742355e-16f;
    p = p * y2 + 2.00018790482477e-13f;
    p = p * y2 + -8.60467152213735e-11f;
    p = p * y2 + 5.12229709037114e-08f;
    p = p * y2 + 1.48572235717979e-05f;
    p = p * y2 + 6.37261928875436e-04f;
    p = p * y2 + 4.89352455891786e-03f;
    p = p * y;
    float q = 1.19825839466702e-06f;
    q = q * y2 + 1.18534705686654e-04f;
    q = q * y2 + 2.26843463243900e-03f;
    q = q * y2 + 4.89352518554385e-03f;
    const float r = p / q; /* q >= 4.89e-3 */
    return (x < tiny && x > -tiny) ? x : r;
}

/* Rational approximation on [-4, 4] (Eigen's); erf is +-1 in float32 beyond. */
static inline float vm_erff(float x) {
    const float y = x > 4.0f ? 4.0f : (x < -4.0f ? -4.0f : x);
    const float y2 = y * y;
    float p = -2.72614225801306e-10f;
    p = p * y2 + 2.77068142495902e-08f;
    p = p * y2 + -2.10102402082508e-06f;
    p = p * y2 + -5.69250639462346e-05f;
    p = p * y2 + -7.34990630326855e-04f;
    p = p * y2 + -2.95459980854025e-03f;
    p = p * y2 + -1.60960333262415e-02f;
    p = p * y;
    float q = -1.45660718464996e-05f;
    q = q * y2 + -2.13374055278905e-04f;
    q = q * y2 + -1.68282697438203e-03f;
    q = q * y2 + -7.37332916720468e-03f;
    q = q * y2 + -1.42647390514189e-02f;
    return p / q; /* q <= -1.43e-2 */
}

/* The logistic function 1 / (1 + exp(-x)). Beyond |x| = 87 it is 1 to float32 precision
 * or below 1.7e-38, so -x is clamped there: 2^n needs one power of two (n within [-126, 126]).
 * exp(r) on |r| <= ln2/2 is a degree-5 polynomial (one term fewer than vm_exp_parts' Cephes
 * one; its coefficients fitted to exp's relative error there, 9.2e-8, by least squares
 * reweighted towards the worst points): the logistic function stays within 2.5e-7 of float64
 * (tests/kernels checks 4e-7). */
static inline float vm_sigmoidf(float x) {
    float t = -x;
    t = t > 87.0f ? 87.0f : t;
    t = t < -87.0f ? -87.0f : t;
    int32_t n;
    const float r = vm_exp_reduce(t, &n);
    float p = 0.008290318f;
    p = p * r + 0.041897934f;
    p = p * r + 0.16667636f;
    p = p * r + 0.4999915f;
    p = p * r + 0.9999997f;
    p = p * r + 1.0f;
    return 1.0f / (1.0f + p * vm_pow2i(n));
}
#endif
