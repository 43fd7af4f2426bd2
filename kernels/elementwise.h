#ifndef RELVM_ELEMENTWISE_H
#define RELVM_ELEMENTWISE_H
#include <stdint.h>

/* Kernel ABI version: bumped whenever a signature in kernels/ changes. */
int relvm_kernels_abi_version(void);

/* out[i] = a[i] OP b[i] over n contiguous float32 elements (out may alias a or b). */
void relvm_add_f32(const float *a, const float *b, float *out, int64_t n);
void relvm_subtract_f32(const float *a, const float *b, float *out, int64_t n);
void relvm_multiply_f32(const float *a, const float *b, float *out, int64_t n);
void relvm_divide_f32(const float *a, const float *b, float *out, int64_t n);
void relvm_maximum_f32(const float *a, const float *b, float *out, int64_t n);
void relvm_minimum_f32(const float *a, const float *b, float *out, int64_t n);

/* out[i] = max(x[i], 0) over n contiguous float32 elements (out may alias x). */
void relvm_relu_f32(const float *x, float *out, int64_t n);
#endif
