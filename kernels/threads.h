/* One thread pool for relvm's kernels and, through its threads callback, for OpenBLAS. */
#ifndef RELVM_THREADS_H
#define RELVM_THREADS_H
#include <stdint.h>
#include <stddef.h>

/* Work on items [begin, end) of a parallel loop; ctx is the kernel's argument block. */
typedef void (*relvm_range_fn)(void *ctx, int64_t begin, int64_t end);

/* Use k threads in all, the calling thread included (clamped to [1, 256]). Returns k. */
int relvm_threads_set(int k);
int relvm_threads_get(void);

/* Run fn over [0, n) in chunks of at least grain items; the caller works too and returns when
 * every chunk is done. Runs inline for one thread, small n, inside another parallel loop, or
 * while another thread's parallel region has the pool (it never waits for that region). */
void relvm_parallel_for(int64_t n, int64_t grain, relvm_range_fn fn, void *ctx);

/* OpenBLAS's openblas_threads_callback: job i runs on pool thread i, all numjobs at once
 * (OpenBLAS's level-3 jobs wait on each other, so they must be alive together). */
void relvm_blas_threads(int sync, void (*dojob)(int, void *, int), int numjobs, size_t elsize,
                        void *jobdata, int dojob_data);
#endif
