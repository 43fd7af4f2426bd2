/* RELVM_ISA_VERSIONS(linkage, name, (params), call): a void function `name` running `call` (an
 * inlined loop), compiled for AVX-512, for AVX2 with FMA and for any x86-64, the best one
 * chosen when the library is loaded (an ifunc). GCC's target_clones cannot ask for AVX2 and FMA
 * together (its "avx2" clone has no FMA, and "arch=" clones are chosen by CPU model, so AMD
 * CPUs got the baseline), and without FMA the polynomials of exp and tanh and a depthwise
 * conv's taps ran a third to a half slower on AVX2 machines.
 *
 * One definition for both kinds of C relvm runs: the kernel library (relvm_config.h includes
 * it) and generated fused kernels (relvm/backends/fusedgen.py puts this text in their prelude;
 * it is package data so the runtime can generate them again). */
#ifndef RELVM_ISA_H
#define RELVM_ISA_H
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define RELVM_ISA_VERSIONS(linkage, name, params, call)                                    \
    __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))                \
    static void name##_avx512 params { call; }                                             \
    __attribute__((target("avx2,fma"))) static void name##_avx2 params { call; }           \
    static void name##_base params { call; }                                               \
    static void (*name##_resolve(void)) params {                                           \
        __builtin_cpu_init();                                                              \
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&     \
            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))      \
            return name##_avx512;                                                          \
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))               \
            return name##_avx2;                                                            \
        return name##_base;                                                                \
    }                                                                                      \
    linkage void name params __attribute__((ifunc(#name "_resolve")));
#else
#define RELVM_ISA_VERSIONS(linkage, name, params, call) linkage void name params { call; }
#endif
#endif
