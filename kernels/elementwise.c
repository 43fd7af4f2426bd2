/* Contiguous float32 elementwise kernels. Semantics match relvm/ops/elementwise.py:
 * maximum/minimum propagate NaN like NumPy. */
#include "relvm_config.h"
#include "elementwise.h"

RELVM_EXPORT int relvm_kernels_abi_version(void) { return 1; }

#define BINARY_F32(NAME, EXPR)                                                           \
    RELVM_EXPORT RELVM_VECTORIZE void relvm_##NAME##_f32(const float *a, const float *b, \
                                                         float *out, int64_t n) {        \
        for (int64_t i = 0; i < n; ++i) {                                                \
            const float x = a[i], y = b[i];                                              \
            out[i] = (EXPR);                                                             \
        }                                                                                \
    }

BINARY_F32(add, x + y)
BINARY_F32(subtract, x - y)
BINARY_F32(multiply, x * y)
BINARY_F32(divide, x / y)
/* NaN propagates: (x != x) is true only for NaN. */
BINARY_F32(maximum, (x != x || y != y) ? x + y : (x > y ? x : y))
BINARY_F32(minimum, (x != x || y != y) ? x + y : (x < y ? x : y))

RELVM_EXPORT RELVM_VECTORIZE void relvm_relu_f32(const float *x, float *out, int64_t n) {
    /* x < 0 is false for NaN, so NaN passes through as in NumPy's maximum(x, 0). */
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] < 0.0f ? 0.0f : x[i];
}
