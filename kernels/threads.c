/* The thread pool. Workers spin briefly after a region (kernels come in quick succession),
 * then sleep on a condition variable, so an idle pool costs nothing while BLAS or Python runs.
 * One region runs at a time: BLAS jobs and relvm's loops never share the threads, which keeps
 * the process at k busy threads whatever the mix. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include "relvm_config.h"
#include "threads.h"

#define MAX_THREADS 256
#define SPIN_ROUNDS 20000 /* ~0.1-1 ms of pause instructions before a worker sleeps */

typedef void (*job_fn)(void *arg, int thread_index);

static struct {
    pthread_mutex_t region; /* held by the thread running a region: one at a time */
    pthread_mutex_t lock;   /* with `wake`, the sleep/wake handshake */
    pthread_cond_t wake;
    /* A region's generation (high bits) and participant count (low 16 bits), published in one
     * store so a worker never pairs one region's count with another's generation. */
    _Atomic uint64_t state;
    _Atomic int pending; /* workers still running the current region */
    job_fn job;          /* stable while the region runs: it cannot end before its workers */
    void *arg;
    int nthreads;
    int nworkers;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          0, 0, NULL, NULL, 1, 0};

#define PARTICIPANTS(state) ((int)((state) & 0xffff))

/* Set in workers and in a thread running a region: nested loops run inline. */
static _Thread_local int in_region;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

struct worker_start {
    int index;
    uint64_t seen; /* the state at creation: a region started later is not missed */
};
static struct worker_start starts[MAX_THREADS];

static uint64_t wait_for_region(uint64_t seen) {
    uint64_t s;
    for (int spin = 0; spin < SPIN_ROUNDS; ++spin) {
        if ((s = atomic_load_explicit(&pool.state, memory_order_acquire)) != seen) return s;
        cpu_relax();
    }
    pthread_mutex_lock(&pool.lock);
    while ((s = atomic_load_explicit(&pool.state, memory_order_acquire)) == seen)
        pthread_cond_wait(&pool.wake, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    return s;
}

static void *worker_main(void *p) {
    const struct worker_start *start = p;
    const int index = start->index;
    uint64_t seen = start->seen;
    in_region = 1;
    for (;;) {
        seen = wait_for_region(seen);
        if (index < PARTICIPANTS(seen)) {
            pool.job(pool.arg, index);
            atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_release);
        }
    }
    return NULL;
}

/* Start workers up to `count`; called with pool.region held, so no region is running. */
static void ensure_workers(int count) {
    while (pool.nworkers < count && pool.nworkers < MAX_THREADS - 1) {
        const int index = pool.nworkers + 1;
        starts[index].index = index;
        starts[index].seen = atomic_load(&pool.state);
        pthread_t tid;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const int failed = pthread_create(&tid, &attr, worker_main, &starts[index]);
        pthread_attr_destroy(&attr);
        if (failed) break; /* run with the workers we have */
        pool.nworkers = index;
    }
}

/* Run job(arg, i) for i in [0, participants) at once: i = 0 on the caller, others on workers. */
static void run_region(job_fn job, void *arg, int participants) {
    pthread_mutex_lock(&pool.region);
    ensure_workers(participants - 1);
    if (participants > pool.nworkers + 1) participants = pool.nworkers + 1;
    pool.job = job;
    pool.arg = arg;
    atomic_store_explicit(&pool.pending, participants - 1, memory_order_relaxed);
    const uint64_t generation = (atomic_load(&pool.state) >> 16) + 1;
    pthread_mutex_lock(&pool.lock);
    atomic_store_explicit(&pool.state, generation << 16 | (uint64_t)participants,
                          memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    in_region = 1;
    job(arg, 0);
    in_region = 0;
    for (int spin = 0; atomic_load_explicit(&pool.pending, memory_order_acquire) > 0; ++spin) {
        if (spin < SPIN_ROUNDS) cpu_relax();
        else sched_yield();
    }
    pthread_mutex_unlock(&pool.region);
}

/* A forked child has only the forking thread: forget the workers and reset the locks. */
static void after_fork_in_child(void) {
    pthread_mutex_init(&pool.region, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pool.nworkers = 0;
    in_region = 0;
}

RELVM_EXPORT int relvm_threads_set(int k) {
    static int fork_handler_installed;
    if (!fork_handler_installed) {
        pthread_atfork(NULL, NULL, after_fork_in_child);
        fork_handler_installed = 1;
    }
    if (k < 1) k = 1;
    if (k > MAX_THREADS) k = MAX_THREADS;
    pool.nthreads = k;
    return k;
}

RELVM_EXPORT int relvm_threads_get(void) { return pool.nthreads; }

struct loop {
    relvm_range_fn fn;
    void *ctx;
    int64_t n, chunk;
    _Atomic int64_t next;
};

static void loop_job(void *arg, int thread_index) {
    struct loop *l = arg;
    (void)thread_index;
    for (;;) {
        const int64_t begin = atomic_fetch_add_explicit(&l->next, l->chunk, memory_order_relaxed);
        if (begin >= l->n) return;
        l->fn(l->ctx, begin, begin + l->chunk < l->n ? begin + l->chunk : l->n);
    }
}

RELVM_EXPORT void relvm_parallel_for(int64_t n, int64_t grain, relvm_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    const int k = pool.nthreads;
    if (k <= 1 || in_region || n <= grain) {
        fn(ctx, 0, n);
        return;
    }
    const int64_t most = (n + grain - 1) / grain;
    const int participants = most < k ? (int)most : k;
    /* Several chunks per thread even out uneven rows; never below the grain. */
    int64_t chunk = (n + 4 * participants - 1) / (4 * participants);
    if (chunk < grain) chunk = grain;
    struct loop l = {fn, ctx, n, chunk, 0};
    run_region(loop_job, &l, participants);
}

struct blas_jobs {
    void (*dojob)(int, void *, int);
    char *jobdata;
    size_t elsize;
    int dojob_data;
};

static void blas_job(void *arg, int thread_index) {
    const struct blas_jobs *b = arg;
    b->dojob(thread_index, b->jobdata + (size_t)thread_index * b->elsize, b->dojob_data);
}

void relvm_blas_threads(int sync, void (*dojob)(int, void *, int), int numjobs, size_t elsize,
                        void *jobdata, int dojob_data) {
    (void)sync; /* OpenBLAS always waits for its jobs; so do we */
    struct blas_jobs b = {dojob, jobdata, elsize, dojob_data};
    if (numjobs == 1) {
        blas_job(&b, 0);
        return;
    }
    run_region(blas_job, &b, numjobs);
}
