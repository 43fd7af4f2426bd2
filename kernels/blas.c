/* OpenBLAS binding. The functions are looked up with dlsym in the library the Python side
 * found through scipy_openblas32.get_lib_dir(), so relvm._kernels imports anywhere and the
 * wheel's library is used wherever pip put it. cblas.h comes from the same wheel at build time:
 * the pointer types below are checked against it. */
#include <dlfcn.h>
#include <string.h>
#include <cblas.h>
#include "relvm_config.h"
#include "blas.h"
#include "internal/types.h"
#include "threads.h"

typedef __typeof__(scipy_cblas_sgemm) sgemm_fn;
typedef __typeof__(scipy_cblas_dgemm) dgemm_fn;
typedef __typeof__(scipy_cblas_sgemv) sgemv_fn;
typedef __typeof__(scipy_cblas_dgemv) dgemv_fn;
typedef __typeof__(scipy_openblas_set_num_threads) set_threads_fn;
typedef __typeof__(scipy_openblas_get_config) get_config_fn;
/* Newer than some wheels' headers (OpenBLAS 0.3.27 / 0.3.29), so spelled out here; both are
 * looked up by name and used only when present. */
#define GEMM_STRIDED_FN(NAME, T)                                                              \
    typedef void NAME(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint m,   \
                      blasint n, blasint k, T alpha, const T *a, blasint lda, blasint stride_a,  \
                      const T *b, blasint ldb, blasint stride_b, T beta, T *c, blasint ldc,      \
                      blasint stride_c, blasint batch);
GEMM_STRIDED_FN(sgemm_strided_fn, float)
GEMM_STRIDED_FN(dgemm_strided_fn, double)
typedef void blas_threads_fn(int sync, void (*dojob)(int, void *, int), int numjobs,
                             size_t elsize, void *jobdata, int dojob_data);
typedef void set_callback_fn(blas_threads_fn *callback);

static struct {
    sgemm_fn *sgemm;
    dgemm_fn *dgemm;
    sgemv_fn *sgemv;
    dgemv_fn *dgemv;
    sgemm_strided_fn *sgemm_strided; /* optional: OpenBLAS >= 0.3.29 */
    dgemm_strided_fn *dgemm_strided;
    set_threads_fn *set_threads;
    get_config_fn *get_config;
    int uses_pool;
} blas;

/* The callback's type is part of the OpenBLAS version relvm was compiled against: install it
 * only into that same version. */
static int same_version(const char *config) {
    const char *want = OPENBLAS_VERSION;
    while (*want == ' ') ++want;
    size_t len = strlen(want);
    while (len && want[len - 1] == ' ') --len;
    return strncmp(config, want, len) == 0 && (config[len] == ' ' || config[len] == 0);
}

RELVM_EXPORT int relvm_blas_open(const char *path, int use_pool) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return RELVM_NO_BLAS;
    blas.sgemm = (sgemm_fn *)dlsym(h, "scipy_cblas_sgemm");
    blas.dgemm = (dgemm_fn *)dlsym(h, "scipy_cblas_dgemm");
    blas.sgemv = (sgemv_fn *)dlsym(h, "scipy_cblas_sgemv");
    blas.dgemv = (dgemv_fn *)dlsym(h, "scipy_cblas_dgemv");
    blas.sgemm_strided = (sgemm_strided_fn *)dlsym(h, "scipy_cblas_sgemm_batch_strided");
    blas.dgemm_strided = (dgemm_strided_fn *)dlsym(h, "scipy_cblas_dgemm_batch_strided");
    blas.set_threads = (set_threads_fn *)dlsym(h, "scipy_openblas_set_num_threads");
    blas.get_config = (get_config_fn *)dlsym(h, "scipy_openblas_get_config");
    set_callback_fn *set_callback =
        (set_callback_fn *)dlsym(h, "scipy_openblas_set_threads_callback_function");
    if (!blas.sgemm || !blas.dgemm || !blas.sgemv || !blas.dgemv || !blas.set_threads ||
        !blas.get_config) {
        blas.sgemm = NULL;
        return RELVM_NO_BLAS;
    }
    if (use_pool && set_callback && same_version(blas.get_config())) {
        set_callback(relvm_blas_threads);
        blas.uses_pool = 1;
    }
    return RELVM_OK;
}

RELVM_EXPORT int relvm_blas_ready(void) { return blas.sgemm != NULL; }

RELVM_EXPORT int relvm_blas_uses_pool(void) { return blas.uses_pool; }

RELVM_EXPORT const char *relvm_blas_config(void) {
    return blas.get_config ? blas.get_config() : "";
}

RELVM_EXPORT void relvm_blas_set_threads(int k) {
    if (blas.set_threads) blas.set_threads(k);
}

static inline int fits_blasint(int64_t v) { return v >= 0 && v <= INT32_MAX; }

/* A product with one row or one column is a matrix-vector product. OpenBLAS's sgemm packs the
 * whole matrix first, which for a single row (batch-1 inference) costs more than the product:
 * gemv reads the matrix once. The vector operand is contiguous in either layout. */
struct gemv_args {
    enum CBLAS_TRANSPOSE trans;
    int rows, cols, ld;
    int64_t matrix_stride, vector_stride;
    int matrix_is_a;
};

static struct gemv_args as_gemv(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                int64_t stride_a, int64_t stride_b) {
    struct gemv_args g;
    if (m == 1) { /* c (1 x n) = a (1 x k) op(b): op(b)^T a */
        g.trans = trans_b ? CblasNoTrans : CblasTrans;
        g.rows = (int)(trans_b ? n : k);
        g.cols = (int)(trans_b ? k : n);
        g.matrix_stride = stride_b;
        g.vector_stride = stride_a;
        g.matrix_is_a = 0;
    } else { /* n == 1: c (m x 1) = op(a) b */
        g.trans = trans_a ? CblasTrans : CblasNoTrans;
        g.rows = (int)(trans_a ? k : m);
        g.cols = (int)(trans_a ? m : k);
        g.matrix_stride = stride_a;
        g.vector_stride = stride_b;
        g.matrix_is_a = 1;
    }
    g.ld = g.cols > 1 ? g.cols : 1;
    return g;
}

/* Leading dimensions: OpenBLAS rejects one below 1, even for an empty operand. */
static inline int ld(int64_t cols) { return (int)relvm_max64(1, cols); }

/* C[i] = op(A[i]) op(B[i]) for i < batch, one definition for float and double: a batch of
 * matrix-vector products goes to gemv, a batch OpenBLAS can take in one strided call (where it
 * has one) to it, the rest to one gemm per matrix. */
#define GEMM_BATCH(NAME, T, GEMM, GEMV, STRIDED)                                                  \
    void NAME(int trans_a, int trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,          \
              const T *a, int64_t stride_a, const T *b, int64_t stride_b, T *c) {                \
        if ((m == 1 || n == 1) && k > 0) {                                                       \
            const struct gemv_args g = as_gemv(trans_a, trans_b, m, n, k, stride_a, stride_b);   \
            const T *mat = g.matrix_is_a ? a : b, *vec = g.matrix_is_a ? b : a;                  \
            for (int64_t i = 0; i < batch; ++i)                                                  \
                blas.GEMV(CblasRowMajor, g.trans, g.rows, g.cols, 1, mat + i * g.matrix_stride,  \
                          g.ld, vec + i * g.vector_stride, 1, 0, c + i * m * n, 1);              \
            return;                                                                              \
        }                                                                                        \
        const enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;                     \
        const enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;                     \
        const int lda = ld(trans_a ? m : k), ldb = ld(trans_b ? k : n), ldc = ld(n);             \
        if (batch > 1 && blas.STRIDED && fits_blasint(stride_a) && fits_blasint(stride_b) &&     \
            fits_blasint(m * n) && fits_blasint(batch)) {                                        \
            /* One call lets OpenBLAS spread a batch of small matrices over the threads. */      \
            blas.STRIDED(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, 1, a, lda,               \
                         (int)stride_a, b, ldb, (int)stride_b, 0, c, ldc, (int)(m * n),          \
                         (int)batch);                                                            \
            return;                                                                              \
        }                                                                                        \
        for (int64_t i = 0; i < batch; ++i)                                                      \
            blas.GEMM(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, 1, a + i * stride_a, lda,   \
                      b + i * stride_b, ldb, 0, c + i * m * n, ldc);                             \
    }
GEMM_BATCH(relvm_sgemm_batch, float, sgemm, sgemv, sgemm_strided)
GEMM_BATCH(relvm_dgemm_batch, double, dgemm, dgemv, dgemm_strided)
