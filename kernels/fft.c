/* DFTs (fft.h). A plan factors n into radices (4s first, then 2, 3, 5 and other primes) and
 * holds the n twiddles w^k, w = exp(-+2 pi i / n); a transform is a recursive decimation in
 * time: each radix-p stage runs p sub-transforms of n / p points (every p-th input) into
 * consecutive blocks of the output, then one butterfly pass combines them in place, reading
 * its twiddles from the table at the stage's stride. A length with a prime factor past
 * MAX_RADIX (the generic butterfly costs p operations a point) goes through Bluestein's
 * chirp-z transform instead: n points times a chirp, convolved with the chirp through FFTs of
 * a power of two M >= 2n - 1, times the chirp again. All arithmetic is in double, whatever
 * the data's dtype: float32 results are rounded once. */
#include "fft.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "relvm_config.h"
#include "internal/scratch.h"
#include "internal/types.h"
#include "threads.h"

#define MAX_RADIX 31
#define MAX_FACTORS 64
#define PI 3.14159265358979323846264338327950288

typedef struct {
    double re, im;
} cpx;

struct relvm_fft_plan {
    int64_t n;
    int inverse, nfactors;
    int64_t factors[2 * MAX_FACTORS]; /* (radix p, points after it m) per stage */
    cpx *twiddles;                    /* n of them; NULL under Bluestein */
    /* Bluestein: the chirp c[k] = exp(-+pi i k^2 / n), and the FFT of the convolution's
     * kernel conj(c[|j|]) of length m (scaled by 1 / m), through the forward plan `sub`. */
    struct relvm_fft_plan *sub;
    cpx *chirp, *kernel;
    int64_t m;
};

static inline cpx cmul(cpx a, cpx b) {
    return (cpx){a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
static inline cpx cadd(cpx a, cpx b) { return (cpx){a.re + b.re, a.im + b.im}; }
static inline cpx csub(cpx a, cpx b) { return (cpx){a.re - b.re, a.im - b.im}; }
static inline cpx cscale(cpx a, double s) { return (cpx){a.re * s, a.im * s}; }

/* exp(sign * 2 pi i * k / n), k in [0, n). */
static cpx unit_root(int64_t k, int64_t n, int sign) {
    const double a = 2.0 * PI * (double)k / (double)n;
    return (cpx){cos(a), sign * sin(a)};
}

static int factorize(struct relvm_fft_plan *p) {
    int64_t n = p->n, radix = 4;
    int count = 0;
    while (n > 1) {
        while (n % radix) {
            radix = radix == 4 ? 2 : radix == 2 ? 3 : radix + 2;
            if (radix * radix > n) radix = n; /* what remains is prime */
        }
        n /= radix;
        p->factors[2 * count] = radix;
        p->factors[2 * count + 1] = n;
        if (radix > MAX_RADIX) return 0;
        ++count;
    }
    p->nfactors = count;
    return 1;
}

/* --- butterflies: out holds p blocks of m points, combined in place ------------------------ */

static void butterfly2(cpx *out, const cpx *tw, int64_t stride, int64_t m) {
    for (int64_t k = 0; k < m; ++k) {
        const cpx t = cmul(out[m + k], tw[k * stride]);
        out[m + k] = csub(out[k], t);
        out[k] = cadd(out[k], t);
    }
}

static void butterfly3(cpx *out, const cpx *tw, int64_t stride, int64_t m) {
    const double e = tw[stride * m].im; /* sin(-+2 pi / 3) */
    for (int64_t k = 0; k < m; ++k) {
        const cpx a = out[k], b = cmul(out[m + k], tw[k * stride]),
                  c = cmul(out[2 * m + k], tw[2 * k * stride]);
        const cpx s = cadd(b, c), d = cscale(csub(b, c), e);
        const cpx h = {a.re - 0.5 * s.re, a.im - 0.5 * s.im};
        out[k] = cadd(a, s);
        out[m + k] = (cpx){h.re - d.im, h.im + d.re};
        out[2 * m + k] = (cpx){h.re + d.im, h.im - d.re};
    }
}

static void butterfly4(cpx *out, const cpx *tw, int64_t stride, int64_t m, int inverse) {
    for (int64_t k = 0; k < m; ++k) {
        const cpx a = out[k], b = cmul(out[m + k], tw[k * stride]),
                  c = cmul(out[2 * m + k], tw[2 * k * stride]),
                  d = cmul(out[3 * m + k], tw[3 * k * stride]);
        const cpx ac = cadd(a, c), a_c = csub(a, c), bd = cadd(b, d), b_d = csub(b, d);
        /* -i (b - d) forward, +i (b - d) inverse */
        const cpx r = inverse ? (cpx){-b_d.im, b_d.re} : (cpx){b_d.im, -b_d.re};
        out[k] = cadd(ac, bd);
        out[m + k] = cadd(a_c, r);
        out[2 * m + k] = csub(ac, bd);
        out[3 * m + k] = csub(a_c, r);
    }
}

static void butterfly5(cpx *out, const cpx *tw, int64_t stride, int64_t m) {
    const cpx ya = tw[stride * m], yb = tw[2 * stride * m]; /* w^(n/5), w^(2n/5) */
    for (int64_t k = 0; k < m; ++k) {
        const cpx s0 = out[k], s1 = cmul(out[m + k], tw[k * stride]),
                  s2 = cmul(out[2 * m + k], tw[2 * k * stride]),
                  s3 = cmul(out[3 * m + k], tw[3 * k * stride]),
                  s4 = cmul(out[4 * m + k], tw[4 * k * stride]);
        const cpx s7 = cadd(s1, s4), s10 = csub(s1, s4), s8 = cadd(s2, s3), s9 = csub(s2, s3);
        out[k] = cadd(s0, cadd(s7, s8));
        const cpx s5 = {s0.re + s7.re * ya.re + s8.re * yb.re,
                        s0.im + s7.im * ya.re + s8.im * yb.re};
        const cpx s6 = {s10.im * ya.im + s9.im * yb.im, -s10.re * ya.im - s9.re * yb.im};
        out[m + k] = csub(s5, s6);
        out[4 * m + k] = cadd(s5, s6);
        const cpx s11 = {s0.re + s7.re * yb.re + s8.re * ya.re,
                         s0.im + s7.im * yb.re + s8.im * ya.re};
        const cpx s12 = {-s10.im * yb.im + s9.im * ya.im, s10.re * yb.im - s9.re * ya.im};
        out[2 * m + k] = cadd(s11, s12);
        out[3 * m + k] = csub(s11, s12);
    }
}

/* Any odd prime p <= MAX_RADIX: each output a direct p-point sum, twiddle and kernel in one
 * table entry (w^(q * stride * (k + j m)) = twiddle w^(q stride k) times the p-point root). */
static void butterfly_generic(cpx *out, const cpx *tw, int64_t stride, int64_t m, int64_t p,
                              int64_t n) {
    cpx in[MAX_RADIX];
    for (int64_t k = 0; k < m; ++k) {
        for (int64_t q = 0; q < p; ++q) in[q] = out[k + q * m];
        for (int64_t j = 0; j < p; ++j) {
            const int64_t step = stride * (k + j * m) % n;
            int64_t at = 0;
            cpx sum = in[0];
            for (int64_t q = 1; q < p; ++q) {
                at += step;
                if (at >= n) at -= n;
                sum = cadd(sum, cmul(in[q], tw[at]));
            }
            out[k + j * m] = sum;
        }
    }
}

/* out[0 .. p m) = the DFT of in[0], in[stride], ..., in[(p m - 1) stride]. */
static void transform(const struct relvm_fft_plan *plan, cpx *out, const cpx *in, int64_t stride,
                      const int64_t *factors) {
    const int64_t p = factors[0], m = factors[1];
    if (m == 1) {
        for (int64_t j = 0; j < p; ++j) out[j] = in[j * stride];
    } else {
        for (int64_t j = 0; j < p; ++j)
            transform(plan, out + j * m, in + j * stride, stride * p, factors + 2);
    }
    const cpx *tw = plan->twiddles;
    switch (p) {
    case 2: butterfly2(out, tw, stride, m); break;
    case 3: butterfly3(out, tw, stride, m); break;
    case 4: butterfly4(out, tw, stride, m, plan->inverse); break;
    case 5: butterfly5(out, tw, stride, m); break;
    default: butterfly_generic(out, tw, stride, m, p, plan->n); break;
    }
}

/* Complex scratch a transform of this plan needs beyond its input and output. */
static int64_t work_size(const struct relvm_fft_plan *p) { return p->sub ? 2 * p->m : 0; }

/* out = DFT(in), in and out n points each and distinct; work holds work_size(plan). */
static void execute(const struct relvm_fft_plan *plan, const cpx *in, cpx *out, cpx *work) {
    if (plan->n == 1) {
        out[0] = in[0];
        return;
    }
    if (!plan->sub) {
        transform(plan, out, in, 1, plan->factors);
        return;
    }
    const int64_t n = plan->n, m = plan->m;
    cpx *a = work, *b = work + m;
    for (int64_t k = 0; k < n; ++k) a[k] = cmul(in[k], plan->chirp[k]);
    memset(a + n, 0, (size_t)(m - n) * sizeof(cpx));
    execute(plan->sub, a, b, NULL);
    /* the inverse FFT of the product as conj(FFT(conj(.))): one forward plan serves both */
    for (int64_t k = 0; k < m; ++k) {
        const cpx t = cmul(b[k], plan->kernel[k]);
        b[k] = (cpx){t.re, -t.im};
    }
    execute(plan->sub, b, a, NULL);
    for (int64_t k = 0; k < n; ++k) out[k] = cmul((cpx){a[k].re, -a[k].im}, plan->chirp[k]);
}

RELVM_EXPORT void relvm_fft_plan_free(struct relvm_fft_plan *plan) {
    if (!plan) return;
    relvm_fft_plan_free(plan->sub);
    free(plan->twiddles);
    free(plan->chirp);
    free(plan->kernel);
    free(plan);
}

RELVM_EXPORT int relvm_fft_plan_bluestein(const struct relvm_fft_plan *plan) {
    return plan->sub != NULL;
}

static int make_bluestein(struct relvm_fft_plan *p) {
    const int64_t n = p->n;
    int64_t m = 1;
    while (m < 2 * n - 1) m *= 2;
    p->m = m;
    p->sub = relvm_fft_plan_new(m, 0);
    p->chirp = malloc((size_t)n * sizeof(cpx));
    p->kernel = calloc((size_t)m, sizeof(cpx));
    cpx *k_time = calloc((size_t)m, sizeof(cpx));
    if (!p->sub || !p->chirp || !p->kernel || !k_time) {
        free(k_time);
        return 0;
    }
    const int sign = p->inverse ? 1 : -1;
    for (int64_t k = 0; k < n; ++k) {
        /* k^2 mod 2n keeps the angle exact: exp(pi i k^2 / n) has period 2n in k^2 */
        const int64_t k2 = (int64_t)((unsigned __int128)k * (unsigned __int128)k %
                                     (unsigned __int128)(2 * n));
        const double a = PI * (double)k2 / (double)n;
        p->chirp[k] = (cpx){cos(a), sign * sin(a)};
    }
    const double scale = 1.0 / (double)m;
    for (int64_t k = 0; k < n; ++k) {
        const cpx c = {p->chirp[k].re * scale, -p->chirp[k].im * scale};
        k_time[k] = c;
        if (k) k_time[m - k] = c;
    }
    execute(p->sub, k_time, p->kernel, NULL);
    free(k_time);
    return 1;
}

RELVM_EXPORT struct relvm_fft_plan *relvm_fft_plan_new(int64_t n, int inverse) {
    if (n < 1 || n > ((int64_t)1 << 40)) return NULL;
    struct relvm_fft_plan *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n;
    p->inverse = inverse != 0;
    if (factorize(p)) {
        p->twiddles = malloc((size_t)n * sizeof(cpx));
        if (!p->twiddles) goto fail;
        for (int64_t k = 0; k < n; ++k) p->twiddles[k] = unit_root(k, n, p->inverse ? 1 : -1);
        return p;
    }
    if (make_bluestein(p)) return p;
fail:
    relvm_fft_plan_free(p);
    return NULL;
}

/* --- lines of data --------------------------------------------------------------------------- */

static inline double load(const void *x, int f32, int64_t i) {
    return f32 ? (double)((const float *)x)[i] : ((const double *)x)[i];
}

static inline void store(void *y, int f32, int64_t i, double v) {
    if (f32)
        ((float *)y)[i] = (float)v;
    else
        ((double *)y)[i] = v;
}

struct dft_job {
    const struct relvm_fft_plan *plan;
    int f32, cin, cout, hermitian, failed;
    int64_t n_in, inner, n_out;
    double scale;
    const void *x, *window;
    void *y;
    int64_t length, frames, step; /* stft */
};

/* Per-thread buffers: the line, its transform and the plan's work. */
static cpx *buffers(const struct relvm_fft_plan *plan) {
    const size_t count = (size_t)(2 * plan->n + work_size(plan));
    return (cpx *)relvm_scratch_floats(count * sizeof(cpx) / sizeof(float));
}

static void dft_lines(void *ctx, int64_t begin, int64_t end) {
    struct dft_job *j = ctx;
    const struct relvm_fft_plan *plan = j->plan;
    const int64_t n = plan->n, inner = j->inner, cin = j->cin, cout = j->cout;
    cpx *line = buffers(plan);
    if (!line) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    cpx *spectrum = line + n, *work = spectrum + n;
    const int64_t given = j->hermitian ? relvm_min64(j->n_in, n / 2 + 1) : relvm_min64(j->n_in, n);
    for (int64_t l = begin; l < end; ++l) {
        const int64_t o = l / inner, i = l % inner;
        const int64_t base = (o * j->n_in * inner + i) * cin, step = inner * cin;
        for (int64_t t = 0; t < given; ++t) {
            line[t].re = load(j->x, j->f32, base + t * step);
            line[t].im = cin == 2 ? load(j->x, j->f32, base + t * step + 1) : 0.0;
        }
        if (j->hermitian) {
            for (int64_t t = given; t <= n / 2; ++t) line[t] = (cpx){0.0, 0.0};
            for (int64_t t = n / 2 + 1; t < n; ++t) line[t] = (cpx){line[n - t].re, -line[n - t].im};
        } else {
            for (int64_t t = given; t < n; ++t) line[t] = (cpx){0.0, 0.0};
        }
        execute(plan, line, spectrum, work);
        const int64_t out_base = (o * j->n_out * inner + i) * cout, out_step = inner * cout;
        for (int64_t k = 0; k < j->n_out; ++k) {
            store(j->y, j->f32, out_base + k * out_step, spectrum[k].re * j->scale);
            if (cout == 2) store(j->y, j->f32, out_base + k * out_step + 1, spectrum[k].im * j->scale);
        }
    }
}

/* Lines per parallel chunk: about RELVM_GRAIN_HEAVY points' transforms. */
static int64_t line_grain(int64_t n) { return relvm_max64(1, RELVM_GRAIN_HEAVY / n); }

RELVM_EXPORT int relvm_dft(int dtype, const struct relvm_fft_plan *plan, int64_t outer,
                           int64_t n_in, int64_t inner, int channels_in, int64_t n_out,
                           int channels_out, int hermitian, double scale, const void *x,
                           void *y) {
    if ((dtype != RELVM_FLOAT32 && dtype != RELVM_FLOAT64) || !plan || outer < 0 || n_in < 0 ||
        inner < 0 || n_out < 0 || n_out > plan->n || channels_in < 1 || channels_in > 2 ||
        channels_out < 1 || channels_out > 2 ||
        (hermitian ? channels_in != 2 || channels_out != 1 : channels_out != 2))
        return RELVM_UNSUPPORTED;
    struct dft_job j = {.plan = plan, .f32 = dtype == RELVM_FLOAT32, .cin = channels_in,
                        .cout = channels_out, .hermitian = hermitian, .n_in = n_in,
                        .inner = inner, .n_out = n_out, .scale = scale, .x = x, .y = y};
    const int64_t lines = outer * inner;
    if (lines == 0 || n_out == 0) return RELVM_OK;
    relvm_parallel_for(lines, line_grain(plan->n), dft_lines, &j);
    return j.failed ? RELVM_NO_MEMORY : RELVM_OK;
}

static void stft_frames(void *ctx, int64_t begin, int64_t end) {
    struct dft_job *j = ctx;
    const struct relvm_fft_plan *plan = j->plan;
    const int64_t n = plan->n, cin = j->cin;
    cpx *line = buffers(plan);
    if (!line) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    cpx *spectrum = line + n, *work = spectrum + n;
    for (int64_t l = begin; l < end; ++l) {
        const int64_t b = l / j->frames, f = l % j->frames;
        const int64_t base = (b * j->length + f * j->step) * cin;
        for (int64_t t = 0; t < n; ++t) {
            const double w = load(j->window, j->f32, t);
            line[t].re = load(j->x, j->f32, base + t * cin) * w;
            line[t].im = cin == 2 ? load(j->x, j->f32, base + t * cin + 1) * w : 0.0;
        }
        execute(plan, line, spectrum, work);
        const int64_t out_base = l * j->n_out * 2;
        for (int64_t k = 0; k < j->n_out; ++k) {
            store(j->y, j->f32, out_base + 2 * k, spectrum[k].re);
            store(j->y, j->f32, out_base + 2 * k + 1, spectrum[k].im);
        }
    }
}

RELVM_EXPORT int relvm_stft(int dtype, const struct relvm_fft_plan *plan, int64_t batch,
                            int64_t length, int channels_in, int64_t frames, int64_t step,
                            int64_t bins, const void *window, const void *x, void *y) {
    if ((dtype != RELVM_FLOAT32 && dtype != RELVM_FLOAT64) || !plan || batch < 0 ||
        length < 0 || frames < 0 || step < 1 || bins < 0 || bins > plan->n ||
        channels_in < 1 || channels_in > 2 ||
        (frames > 0 && (frames - 1) * step + plan->n > length))
        return RELVM_UNSUPPORTED;
    struct dft_job j = {.plan = plan, .f32 = dtype == RELVM_FLOAT32, .cin = channels_in,
                        .cout = 2, .n_out = bins, .x = x, .window = window, .y = y,
                        .length = length, .frames = frames, .step = step};
    if (batch * frames == 0 || bins == 0) return RELVM_OK;
    relvm_parallel_for(batch * frames, line_grain(plan->n), stft_frames, &j);
    return j.failed ? RELVM_NO_MEMORY : RELVM_OK;
}
