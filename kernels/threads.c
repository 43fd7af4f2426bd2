/* The thread pool. Workers spin briefly after a region (kernels come in quick succession),
 * then sleep on a condition variable, so an idle pool costs nothing while BLAS or Python runs.
 * One region runs at a time: BLAS jobs and relvm's loops never share the threads, which keeps
 * the process at k busy threads whatever the mix.
 *
 * Several threads may call kernels at once (one VM called from many Python threads: cffi
 * releases the GIL). A loop whose caller finds another thread's region running does not wait
 * for it: it runs on the calling thread alone (the pool's threads are busy anyway), so the
 * kernels of different calls are never serialised. A BLAS region cannot do that -- OpenBLAS's
 * jobs wait on each other, so they must all run at once -- and waits for the pool instead
 * (OpenBLAS itself runs one threaded product at a time).
 *
 * A parallel loop hands out its chunks to whoever comes: the caller takes them too, and when it
 * has run out it closes the region's gate, so a worker that has not started by then (its core
 * busy with another process) never joins, and the caller waits only for workers already inside.
 * A loop therefore never waits for a scheduler time slice. OpenBLAS's jobs wait on each other,
 * so a BLAS region instead waits for every job.
 *
 * On a machine whose cores other processes keep busy, threads that wait for work must not
 * take the core from the one thread that has it: waiting threads yield their core every few
 * microseconds, and when workers keep missing loops (MISS_LIMIT), loops run on their caller
 * alone for a while without waking anyone. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include "relvm_config.h"
#include "threads.h"
#include "internal/types.h"

#define MAX_THREADS 256
/* A worker waits for the next region this long before it sleeps: kernels come in quick
 * succession (a few microseconds of Python apart), and a sleeping worker takes tens of
 * microseconds to wake. Measured in time, not in pause instructions, whose cost differs
 * tenfold between CPUs. While it waits it yields its core every SPIN_SLICE_NS, so a thread
 * with work (the caller, when another process holds the other core) runs instead. */
#define SPIN_NS 200000
#define SPIN_SLICE_NS 4000
/* Participation adapts to a busy machine: when workers miss MISS_LIMIT loop regions in a row
 * (the caller ran every chunk before any worker came in: their cores are taken), the next
 * ALONE_REGIONS loops run on the caller alone, without waking anyone, then workers are tried
 * again. On an idle machine workers join every region and nothing changes. */
#define MISS_LIMIT 8
#define ALONE_REGIONS 256

typedef void (*job_fn)(void *arg, int thread_index);

static struct {
    pthread_mutex_t region; /* held by the thread running a region: one at a time */
    pthread_mutex_t lock;   /* with `wake`, the sleep/wake handshake */
    pthread_cond_t wake;
    /* A region's generation (bits 17 and up), whether it is gated (bit 16) and its participant
     * count (bits 0-15), published in one store so a worker never pairs one region's count or
     * kind with another's generation. */
    _Atomic uint64_t state;
    _Atomic int pending; /* BLAS regions: workers still running the current region */
    /* Loop regions: the generation's low 31 bits (bits 32-62), the gate's open bit (31) and
     * the number of workers inside (bits 0-30), in one word so joining is atomic. */
    _Atomic uint64_t gate;
    job_fn job;          /* stable while the region runs: it cannot end before its workers */
    void *arg;
    _Atomic int nthreads; /* set from Python while other threads may be running kernels */
    int nworkers;
    _Atomic int entered; /* loop regions: workers that came in, this region */
    /* Kept by the thread holding `region`: how many loop regions in a row no worker joined,
     * and how many loops to run on the caller alone before asking the workers again. */
    int misses, alone;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          0, 0, 0, NULL, NULL, 1, 0, 0, 0, 0};

#define GATE_OPEN ((uint64_t)1 << 31)
#define GATE_INSIDE(g) ((g) & (GATE_OPEN - 1))
#define GATE_GEN(gen) (((gen) & 0x7fffffff) << 32)

/* Enter generation `gen`'s loop region if its gate is still open. */
static int gate_enter(uint64_t gen) {
    uint64_t g = atomic_load_explicit(&pool.gate, memory_order_acquire);
    while ((g & ~(GATE_OPEN - 1)) == (GATE_GEN(gen) | GATE_OPEN)) {
        if (atomic_compare_exchange_weak_explicit(&pool.gate, &g, g + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return 1;
    }
    return 0;
}

#define PARTICIPANTS(state) ((int)((state) & 0xffff))
#define GATED(state) ((int)((state) >> 16 & 1))
#define GENERATION(state) ((state) >> 17)

/* Set in workers and in a thread running a region: nested loops run inline. */
static _Thread_local int in_region;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spin until done(arg) holds, yielding the core every SPIN_SLICE_NS; false after `limit_ns`. */
static int spin_until(int (*done)(const void *), const void *arg, int64_t limit_ns) {
    const int64_t start = now_ns();
    int64_t slice = start;
    for (;;) {
        for (int i = 0; i < 32; ++i) {
            if (done(arg)) return 1;
            cpu_relax();
        }
        const int64_t t = now_ns();
        if (t - start >= limit_ns) return 0;
        if (t - slice >= SPIN_SLICE_NS) {
            sched_yield();
            slice = t;
        }
    }
}

struct worker_start {
    int index;
    uint64_t seen; /* the state at creation: a region started later is not missed */
};
static struct worker_start starts[MAX_THREADS];

static int state_moved(const void *seen) {
    return atomic_load_explicit(&pool.state, memory_order_acquire) != *(const uint64_t *)seen;
}

static uint64_t wait_for_region(uint64_t seen) {
    uint64_t s;
    if (spin_until(state_moved, &seen, SPIN_NS))
        return atomic_load_explicit(&pool.state, memory_order_acquire);
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
        if (index >= PARTICIPANTS(seen)) continue;
        if (GATED(seen)) { /* job and arg are read inside the gate: the region cannot end */
            if (!gate_enter(GENERATION(seen))) continue;
            atomic_fetch_add_explicit(&pool.entered, 1, memory_order_relaxed);
            pool.job(pool.arg, index);
            atomic_fetch_sub_explicit(&pool.gate, 1, memory_order_release);
        } else {
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

static int nobody_inside(const void *unused) {
    return GATE_INSIDE(atomic_load_explicit(&pool.gate, memory_order_acquire)) == 0;
}

static int no_jobs_pending(const void *unused) {
    return atomic_load_explicit(&pool.pending, memory_order_acquire) <= 0;
}

/* Run job(arg, i) for i in [0, participants): i = 0 on the caller, others on workers. With
 * `gated`, job is a loop that any subset of threads can finish: workers that have not joined
 * when the caller's job returns never run it. Otherwise every job runs, all at once. The
 * caller holds pool.region; it is released here. */
static void run_region(job_fn job, void *arg, int participants, int gated) {
    ensure_workers(participants - 1);
    if (participants > pool.nworkers + 1) participants = pool.nworkers + 1;
    pool.job = job;
    pool.arg = arg;
    atomic_store_explicit(&pool.pending, gated ? 0 : participants - 1, memory_order_relaxed);
    atomic_store_explicit(&pool.entered, 0, memory_order_relaxed);
    const uint64_t generation = GENERATION(atomic_load(&pool.state)) + 1;
    atomic_store_explicit(&pool.gate, GATE_GEN(generation) | GATE_OPEN, memory_order_relaxed);
    pthread_mutex_lock(&pool.lock);
    atomic_store_explicit(&pool.state,
                          generation << 17 | (uint64_t)(gated != 0) << 16 | (uint64_t)participants,
                          memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    in_region = 1;
    job(arg, 0);
    in_region = 0;
    if (gated) { /* close the gate, then wait for those inside (they are running) */
        const uint64_t g = atomic_fetch_and_explicit(&pool.gate, ~GATE_OPEN, memory_order_acq_rel);
        const int joined = atomic_load_explicit(&pool.entered, memory_order_relaxed) != 0 ||
                           GATE_INSIDE(g) != 0;
        pool.misses = joined ? 0 : pool.misses + 1;
        if (pool.misses >= MISS_LIMIT) { /* their cores are taken: stop asking for a while */
            pool.misses = 0;
            pool.alone = ALONE_REGIONS;
        }
        while (!spin_until(nobody_inside, NULL, SPIN_NS)) {}
    }
    while (!spin_until(no_jobs_pending, NULL, SPIN_NS)) {}
    pthread_mutex_unlock(&pool.region);
}

/* A forked child has only the forking thread: forget the workers and reset the locks. */
static void after_fork_in_child(void) {
    pool.misses = pool.alone = 0;
    pthread_mutex_init(&pool.region, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pool.nworkers = 0;
    in_region = 0;
}

static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;

static void install_fork_handler(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }

RELVM_EXPORT int relvm_threads_set(int k) {
    pthread_once(&fork_handler_once, install_fork_handler);
    if (k < 1) k = 1;
    if (k > MAX_THREADS) k = MAX_THREADS;
    atomic_store_explicit(&pool.nthreads, k, memory_order_relaxed);
    return k;
}

RELVM_EXPORT int relvm_threads_get(void) {
    return atomic_load_explicit(&pool.nthreads, memory_order_relaxed);
}

/* A loop's items are split into one home block per participant; each thread claims chunks of
 * its own block first, then of the others' (whose owners may be late or absent). When every
 * thread turns up, thread t always runs the same items, call after call, so what it touched
 * last time (a GEMM's slice of the weights) is still in its core's cache. */
struct loop {
    relvm_range_fn fn;
    void *ctx;
    int64_t chunk;
    int participants;
    int64_t end[MAX_THREADS];
    _Atomic int64_t next[MAX_THREADS];
};

static void loop_job(void *arg, int thread_index) {
    struct loop *l = arg;
    for (int b = 0; b < l->participants; ++b) {
        const int block = (thread_index + b) % l->participants;
        for (;;) {
            const int64_t begin =
                atomic_fetch_add_explicit(&l->next[block], l->chunk, memory_order_relaxed);
            if (begin >= l->end[block]) break;
            l->fn(l->ctx, begin, relvm_min64(begin + l->chunk, l->end[block]));
        }
    }
}

RELVM_EXPORT void relvm_parallel_for(int64_t n, int64_t grain, relvm_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    const int k = relvm_threads_get();
    if (k <= 1 || in_region || n <= grain) {
        fn(ctx, 0, n);
        return;
    }
    if (pthread_mutex_trylock(&pool.region) != 0) { /* another thread's region: don't wait */
        fn(ctx, 0, n);
        return;
    }
    if (pool.alone > 0) { /* workers have been missing: the machine is busy (see MISS_LIMIT) */
        pool.alone--;
        pthread_mutex_unlock(&pool.region);
        fn(ctx, 0, n);
        return;
    }
    const int64_t most = (n + grain - 1) / grain;
    const int participants = most < k ? (int)most : k;
    /* Sixteen chunks per thread, never below the grain: a thread that finishes early steals
     * at most a chunk's worth at the end, so a late or slower thread delays the loop by at most
     * 1/16 of its share (with 4 chunks, the reference convnet at N=128 ran 12% slower). */
    int64_t chunk = (n + 16 * participants - 1) / (16 * participants);
    if (chunk < grain) chunk = grain;
    struct loop l;
    l.fn = fn;
    l.ctx = ctx;
    l.chunk = chunk;
    l.participants = participants;
    for (int t = 0; t < participants; ++t) {
        atomic_init(&l.next[t], n * t / participants);
        l.end[t] = n * (t + 1) / participants;
    }
    run_region(loop_job, &l, participants, 1);
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
    pthread_mutex_lock(&pool.region); /* the jobs need the pool's threads all at once */
    run_region(blas_job, &b, numjobs, 0);
}
