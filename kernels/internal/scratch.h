/* A per-thread scratch buffer, kept between calls and grown as needed (im2col matrices and
 * packed panels are large, and kernels run on pool threads that live as long as the process).
 * 64-byte aligned, so vector loads from it never split a cache line. Internal: not cdef. */
#ifndef RELVM_INTERNAL_SCRATCH_H
#define RELVM_INTERNAL_SCRATCH_H
#include <pthread.h>
#include <stdlib.h>

/* Slots a thread holds at once: a kernel's working buffer, and one a calling thread keeps
 * while its pool runs parallel loops that use the first (a conv pair's whole padded batch). */
#define RELVM_SCRATCH_SLOTS 2

struct relvm_scratch {
    float *data[RELVM_SCRATCH_SLOTS];
    size_t cap[RELVM_SCRATCH_SLOTS];
};

static pthread_key_t relvm_scratch_key;
static pthread_once_t relvm_scratch_once = PTHREAD_ONCE_INIT;

static void relvm_scratch_free(void *p) {
    struct relvm_scratch *s = p;
    for (int i = 0; i < RELVM_SCRATCH_SLOTS; ++i) free(s->data[i]);
    free(s);
}

static void relvm_scratch_init(void) {
    pthread_key_create(&relvm_scratch_key, relvm_scratch_free);
}

/* `count` floats (at least one) in slot `slot` for the calling thread, or NULL when memory
 * runs out. Each source file that includes this header has its own buffers. */
static float *relvm_scratch_floats(int slot, size_t count) {
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
    if (s->cap[slot] < count) {
        free(s->data[slot]);
        const size_t bytes = (count * sizeof(float) + 63) / 64 * 64; /* as aligned_alloc asks */
        s->data[slot] = aligned_alloc(64, bytes);
        s->cap[slot] = s->data[slot] ? count : 0;
    }
    return s->data[slot];
}
#endif
