/* Short C names for relvm's element types, and their sizes by dtype code. Internal: not cdef. */
#ifndef RELVM_INTERNAL_TYPES_H
#define RELVM_INTERNAL_TYPES_H
#include <stdint.h>
#include "../relvm_config.h"

typedef float f32;
typedef double f64;
typedef _Float16 f16;
typedef int64_t i64;
typedef int32_t i32;
typedef int8_t i8;
typedef uint8_t u8;
typedef int16_t i16;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;

/* Bytes per element of each dtype code (bool is one byte holding 0 or 1, as in NumPy). */
static const int64_t relvm_itemsize[RELVM_NUM_DTYPES] = {4, 8, 2, 8, 4, 1, 1, 1, 2, 2, 4, 8};

/* Table entries for every integer dtype: OP##_i64 ... OP##_u64 (each source defines them). */
#define RELVM_INT_ENTRIES(OP)                                                                 \
    [RELVM_INT64] = OP##_i64, [RELVM_INT32] = OP##_i32, [RELVM_INT8] = OP##_i8,               \
    [RELVM_UINT8] = OP##_u8, [RELVM_INT16] = OP##_i16, [RELVM_UINT16] = OP##_u16,             \
    [RELVM_UINT32] = OP##_u32, [RELVM_UINT64] = OP##_u64

static inline int64_t relvm_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t relvm_max64(int64_t a, int64_t b) { return a > b ? a : b; }
#endif
