/* Shared definitions for every kernel source. */
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

#define RELVM_EXPORT __attribute__((visibility("default")))
#endif
