/* A per-thread scratch buffer, kept between calls and grown as needed (padded images and
 * packed panels are large, and kernels run on pool threads that live as long as the process).
 * 64-byte aligned, so vector loads from it never split a cache line. Internal: not cdef. */
#ifndef RELVM_INTERNAL_SCRATCH_H
#define RELVM_INTERNAL_SCRATCH_H
#include <pthread.h>
#include <stdlib.h>

/* Under AddressSanitizer (CI's sanitizer stage) the part of the buffer past what a kernel
 * asked for is poisoned, so a kernel that writes past its request is reported even when an
 * earlier, larger request left the buffer bigger. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define RELVM_SCRATCH_LIMIT(s, count)                                                          \
    do {                                                                                       \
        ASAN_UNPOISON_MEMORY_REGION((s)->data, (s)->cap * sizeof(float));                      \
        ASAN_POISON_MEMORY_REGION((s)->data + (count), ((s)->cap - (count)) * sizeof(float));   \
    } while (0)
#define RELVM_SCRATCH_UNLIMIT(s) ASAN_UNPOISON_MEMORY_REGION((s)->data, (s)->cap * sizeof(float))
#else
#define RELVM_SCRATCH_LIMIT(s, count) ((void)0)
#define RELVM_SCRATCH_UNLIMIT(s) ((void)0)
#endif

struct relvm_scratch {
    float *data;
    size_t cap;
};

static pthread_key_t relvm_scratch_key;
static pthread_once_t relvm_scratch_once = PTHREAD_ONCE_INIT;

static void relvm_scratch_free(void *p) {
    struct relvm_scratch *s = p;
    if (s->data) RELVM_SCRATCH_UNLIMIT(s);
    free(s->data);
    free(s);
}

static void relvm_scratch_init(void) {
    pthread_key_create(&relvm_scratch_key, relvm_scratch_free);
}

/* `count` floats (at least one) for the calling thread, or NULL when memory runs out. Each
 * source file that includes this header has its own buffer. */
static float *relvm_scratch_floats(size_t count) {
    pthread_once(&relvm_scratch_once, relvm_scratch_init);
    struct relvm_scratch *s = pthread_getspecific(relvm_scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || pthread_setspecific(relvm_scratch_key, s)) {
            free(s);
            return NULL;
        }
    }
    if (count == 0) count = 1;
    if (s->cap < count) {
        if (s->data) RELVM_SCRATCH_UNLIMIT(s);
        free(s->data);
        const size_t bytes = (count * sizeof(float) + 63) / 64 * 64; /* as aligned_alloc asks */
        s->data = aligned_alloc(64, bytes);
        s->cap = s->data ? count : 0;
    }
    if (s->data) RELVM_SCRATCH_LIMIT(s, count);
    return s->data;
}
#endif
