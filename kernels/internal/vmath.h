/* Vectorizable math for the kernel library: the float32 exp, tanh and erf shared with generated
 * kernels (relvm/backends/relvm_vmath.h), and reductions.
 * Internal: not cdef. */
#ifndef RELVM_INTERNAL_VMATH_H
#define RELVM_INTERNAL_VMATH_H
#include <stdint.h>
#include <math.h>
#include <string.h>

#include "relvm_vmath.h"

/* Reductions in VM_LANES interleaved partial results. A single running sum (or max) is a chain
 * of dependent operations that GCC may not reorder without -ffast-math, so it stays scalar; lanes
 * fix another order, which vectorizes. Float sums accumulate in double, as the references do. */
#define VM_LANES 16

#define VM_REDUCTIONS(S, T, KT, MAGNITUDE, INF_BITS)                                      \
    static inline double vm_sum_##S(const T *x, int64_t n) {                                  \
        double part[VM_LANES] = {0};                                                          \
        int64_t i = 0;                                                                        \
        for (; i + VM_LANES <= n; i += VM_LANES)                                              \
            for (int l = 0; l < VM_LANES; ++l) part[l] += (double)x[i + l];                   \
        double total = 0.0;                                                                   \
        for (; i < n; ++i) total += (double)x[i];                                             \
        for (int l = 0; l < VM_LANES; ++l) total += part[l];                                  \
        return total;                                                                         \
    }                                                                                         \
    /* sum of (x - mean)^2: the variance's numerator */                                       \
    static inline double vm_sum_sq_dev_##S(const T *x, int64_t n, double mean) {              \
        double part[VM_LANES] = {0};                                                          \
        int64_t i = 0;                                                                        \
        for (; i + VM_LANES <= n; i += VM_LANES)                                              \
            for (int l = 0; l < VM_LANES; ++l) {                                              \
                const double d = (double)x[i + l] - mean;                                     \
                part[l] += d * d;                                                             \
            }                                                                                 \
        double total = 0.0;                                                                   \
        for (; i < n; ++i) total += ((double)x[i] - mean) * ((double)x[i] - mean);            \
        for (int l = 0; l < VM_LANES; ++l) total += part[l];                                  \
        return total;                                                                         \
    }                                                                                         \
    /* max or min with NaN winning (-inf / +inf for none). GCC will not vectorize a float    \
     * max reduction without -ffinite-math-only, but it does an integer one: compare by the  \
     * float's order-preserving integer key (the magnitude bits of negatives flipped) and   \
     * track NaN with an integer OR. */                                                     \
    static inline KT vm_bits_##S(T f) {                                                       \
        KT b;                                                                                 \
        memcpy(&b, &f, sizeof b);                                                             \
        return b;                                                                             \
    }                                                                                         \
    static inline KT vm_key_of_bits_##S(KT b) {                                               \
        return b ^ ((b >> (8 * sizeof b - 1)) & MAGNITUDE);                                   \
    }                                                                                         \
    static inline T vm_extreme_##S(const T *x, int64_t n, int is_max) {                       \
        KT best = vm_key_of_bits_##S(vm_bits_##S(is_max ? (T)-INFINITY : (T)INFINITY));       \
        KT nan = 0;                                                                           \
        if (is_max) {                                                                         \
            for (int64_t i = 0; i < n; ++i) {                                                 \
                const KT b = vm_bits_##S(x[i]), k = vm_key_of_bits_##S(b);                    \
                best = k > best ? k : best;                                                   \
                nan |= (b & MAGNITUDE) > INF_BITS;                                            \
            }                                                                                 \
        } else {                                                                              \
            for (int64_t i = 0; i < n; ++i) {                                                 \
                const KT b = vm_bits_##S(x[i]), k = vm_key_of_bits_##S(b);                    \
                best = k < best ? k : best;                                                   \
                nan |= (b & MAGNITUDE) > INF_BITS;                                            \
            }                                                                                 \
        }                                                                                     \
        if (nan) return (T)NAN;                                                               \
        const KT b = vm_key_of_bits_##S(best); /* the key map is its own inverse */           \
        T f;                                                                                  \
        memcpy(&f, &b, sizeof f);                                                             \
        return f;                                                                             \
    }                                                                                         \
    static inline T vm_max_##S(const T *x, int64_t n) { return vm_extreme_##S(x, n, 1); }

VM_REDUCTIONS(f32, float, int32_t, 0x7fffffff, 0x7f800000)
VM_REDUCTIONS(f64, double, int64_t, INT64_C(0x7fffffffffffffff), INT64_C(0x7ff0000000000000))
#endif
