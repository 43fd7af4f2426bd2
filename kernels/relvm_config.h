/* Shared definitions for every kernel source. This header is also read as cffi cdef (its
 * preprocessor lines dropped), so it holds only enums besides the macros. */
#ifndef RELVM_CONFIG_H
#define RELVM_CONFIG_H
#include <stdint.h>
#include <stddef.h>

/* Multi-versioned hot loops: the loader picks the best clone for this CPU. */
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#define RELVM_VECTORIZE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RELVM_VECTORIZE
#endif

/* Hot loops that need FMA on AVX2 machines: RELVM_ISA_VERSIONS (relvm/backends/relvm_isa.h). */
#include "relvm_isa.h"

#define RELVM_EXPORT __attribute__((visibility("default")))

/* Elements per parallel chunk at least: below this, waking a thread costs more than it saves. */
#define RELVM_GRAIN (1 << 16)
/* The same for work of ~20 flops an element (exp, tanh, erf, softmax). */
#define RELVM_GRAIN_HEAVY (1 << 13)

/* Element types, numbered as relvm/dtypes.py orders DTYPES (the executable's dtype codes):
 * new ones are appended, never inserted. */
enum relvm_dtype {
    RELVM_FLOAT32 = 0, RELVM_FLOAT64 = 1, RELVM_FLOAT16 = 2, RELVM_INT64 = 3,
    RELVM_INT32 = 4, RELVM_INT8 = 5, RELVM_UINT8 = 6, RELVM_BOOL = 7, RELVM_INT16 = 8,
    RELVM_UINT16 = 9, RELVM_UINT32 = 10, RELVM_UINT64 = 11, RELVM_NUM_DTYPES = 12
};

/* What a kernel returns: 0, or why it did nothing (the Python side raises). */
enum relvm_status {
    RELVM_OK = 0, RELVM_UNSUPPORTED = -1, RELVM_NO_MEMORY = -2, RELVM_BAD_INDEX = -3,
    RELVM_NO_BLAS = -4, RELVM_TOO_LARGE = -5
};
#endif
