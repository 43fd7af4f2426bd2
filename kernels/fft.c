/* DFTs (fft.h). A plan factors n into radices (4s first, then 2, 3, 5 and other primes) and
 * holds the n twiddles w^k, w = exp(-+2 pi i / n), and each stage's own in the order its
 * butterflies read them; a transform is a recursive decimation in time: each radix-p stage runs
 * p sub-transforms of n / p points (every p-th input) into consecutive blocks of the output,
 * then one butterfly pass combines them in place. A length with a prime factor past MAX_RADIX
 * (the generic butterfly costs p operations a point) goes through Bluestein's chirp-z
 * transform instead: n points times a chirp, convolved with the chirp through FFTs of a length
 * M >= 2n - 1 of radices 2, 3 and 5, times the chirp again. Real lines are transformed two at
 * a time, as the real and imaginary parts of one complex line, and separated by symmetry.
 * All arithmetic is in double, whatever the data's dtype: float32 results are rounded once. */
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
    /* stage s's w^(q k stride) at [k (p - 1) + q - 1], k < m, 0 < q < p (in `twiddles`'
     * allocation, after the n) */
    cpx *stage[MAX_FACTORS];
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

/* --- butterflies: out holds p blocks of m points, combined in place; tw the stage's ---------- */

static void butterfly2(cpx *out, const cpx *tw, int64_t m) {
    for (int64_t k = 0; k < m; ++k) {
        const cpx t = cmul(out[m + k], tw[k]);
        out[m + k] = csub(out[k], t);
        out[k] = cadd(out[k], t);
    }
}

static void butterfly3(cpx *out, const cpx *tw, int64_t m, double e /* sin(-+2 pi / 3) */) {
    for (int64_t k = 0; k < m; ++k) {
        const cpx a = out[k], b = cmul(out[m + k], tw[2 * k]),
                  c = cmul(out[2 * m + k], tw[2 * k + 1]);
        const cpx s = cadd(b, c), d = cscale(csub(b, c), e);
        const cpx h = {a.re - 0.5 * s.re, a.im - 0.5 * s.im};
        out[k] = cadd(a, s);
        out[m + k] = (cpx){h.re - d.im, h.im + d.re};
        out[2 * m + k] = (cpx){h.re + d.im, h.im - d.re};
    }
}

static void butterfly4(cpx *out, const cpx *tw, int64_t m, int inverse) {
    for (int64_t k = 0; k < m; ++k) {
        const cpx a = out[k], b = cmul(out[m + k], tw[3 * k]),
                  c = cmul(out[2 * m + k], tw[3 * k + 1]),
                  d = cmul(out[3 * m + k], tw[3 * k + 2]);
        const cpx ac = cadd(a, c), a_c = csub(a, c), bd = cadd(b, d), b_d = csub(b, d);
        /* -i (b - d) forward, +i (b - d) inverse */
        const cpx r = inverse ? (cpx){-b_d.im, b_d.re} : (cpx){b_d.im, -b_d.re};
        out[k] = cadd(ac, bd);
        out[m + k] = cadd(a_c, r);
        out[2 * m + k] = csub(ac, bd);
        out[3 * m + k] = csub(a_c, r);
    }
}

/* ya, yb: w^(n/5), w^(2n/5) */
static void butterfly5(cpx *out, const cpx *tw, int64_t m, cpx ya, cpx yb) {
    for (int64_t k = 0; k < m; ++k) {
        const cpx s0 = out[k], s1 = cmul(out[m + k], tw[4 * k]),
                  s2 = cmul(out[2 * m + k], tw[4 * k + 1]),
                  s3 = cmul(out[3 * m + k], tw[4 * k + 2]),
                  s4 = cmul(out[4 * m + k], tw[4 * k + 3]);
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
 * entry of the whole table (w^(q * stride * (k + j m)) = twiddle w^(q stride k) times the
 * p-point root). */
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

/* out[0 .. p m) = the DFT of in[0], in[stride], ..., in[(p m - 1) stride], stage s on. */
static void transform(const struct relvm_fft_plan *plan, cpx *out, const cpx *in, int64_t stride,
                      int s) {
    const int64_t p = plan->factors[2 * s], m = plan->factors[2 * s + 1], n = plan->n;
    if (m == 1) {
        for (int64_t j = 0; j < p; ++j) out[j] = in[j * stride];
    } else {
        for (int64_t j = 0; j < p; ++j)
            transform(plan, out + j * m, in + j * stride, stride * p, s + 1);
    }
    const cpx *all = plan->twiddles, *tw = plan->stage[s];
    switch (p) {
    case 2: butterfly2(out, tw, m); break;
    case 3: butterfly3(out, tw, m, all[n / 3].im); break;
    case 4: butterfly4(out, tw, m, plan->inverse); break;
    case 5: butterfly5(out, tw, m, all[n / 5], all[2 * n / 5]); break;
    default: butterfly_generic(out, all, stride, m, p, n); break;
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
        transform(plan, out, in, 1, 0);
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

/* The least 2^a 3^b 5^c >= n: Bluestein's convolution length (513 -> 540, not 1024). */
static int64_t smooth_size(int64_t n) {
    int64_t best = 1;
    while (best < n) best *= 2;
    for (int64_t f5 = 1; f5 < best; f5 *= 5)
        for (int64_t f35 = f5; f35 < best; f35 *= 3) {
            int64_t x = f35;
            while (x < n) x *= 2;
            if (x < best) best = x;
        }
    return best;
}

static int make_bluestein(struct relvm_fft_plan *p) {
    const int64_t n = p->n;
    const int64_t m = smooth_size(2 * n - 1);
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
        const int sign = p->inverse ? 1 : -1;
        int64_t staged = 0;
        for (int s = 0; s < p->nfactors; ++s)
            staged += (p->factors[2 * s] - 1) * p->factors[2 * s + 1];
        p->twiddles = malloc((size_t)(n + staged) * sizeof(cpx));
        if (!p->twiddles) goto fail;
        for (int64_t k = 0; k < n; ++k) p->twiddles[k] = unit_root(k, n, sign);
        cpx *next = p->twiddles + n;
        int64_t stride = 1;
        for (int s = 0; s < p->nfactors; stride *= p->factors[2 * s], ++s) {
            const int64_t radix = p->factors[2 * s], m = p->factors[2 * s + 1];
            p->stage[s] = next;
            for (int64_t k = 0; k < m; ++k)
                for (int64_t q = 1; q < radix; ++q)
                    *next++ = p->twiddles[q * k * stride];
        }
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

/* Bin k of the real lines whose transforms are the real and imaginary parts of z (one complex
 * transform of n points holding two real lines): a = (z[k] + conj z[n-k]) / 2,
 * b = (z[k] - conj z[n-k]) / 2i. */
static inline void split_pair(const cpx *z, int64_t n, int64_t k, cpx *a, cpx *b) {
    const cpx u = z[k], v = z[k ? n - k : 0];
    *a = (cpx){0.5 * (u.re + v.re), 0.5 * (u.im - v.im)};
    *b = (cpx){0.5 * (u.im + v.im), 0.5 * (v.re - u.re)};
}

/* Where line l of a dft_job starts in x and in y (elements). */
static inline void line_at(const struct dft_job *j, int64_t l, int64_t *in, int64_t *out) {
    const int64_t o = l / j->inner, i = l % j->inner;
    *in = (o * j->n_in * j->inner + i) * j->cin;
    *out = (o * j->n_out * j->inner + i) * j->cout;
}

static void dft_lines(void *ctx, int64_t begin, int64_t end) {
    struct dft_job *j = ctx;
    const struct relvm_fft_plan *plan = j->plan;
    const int64_t n = plan->n, cin = j->cin, cout = j->cout;
    const int64_t step = j->inner * cin, out_step = j->inner * cout;
    cpx *line = buffers(plan);
    if (!line) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    cpx *spectrum = line + n, *work = spectrum + n;
    const int64_t given = j->hermitian ? relvm_min64(j->n_in, n / 2 + 1) : relvm_min64(j->n_in, n);
    for (int64_t l = begin; l < end;) {
        /* two real lines at once: the second as the imaginary part */
        const int pair = cin == 1 && l + 1 < end;
        int64_t base, out_base, base2 = 0, out_base2 = 0;
        line_at(j, l, &base, &out_base);
        if (pair) line_at(j, l + 1, &base2, &out_base2);
        for (int64_t t = 0; t < given; ++t) {
            line[t].re = load(j->x, j->f32, base + t * step);
            line[t].im = cin == 2 ? load(j->x, j->f32, base + t * step + 1)
                         : pair   ? load(j->x, j->f32, base2 + t * step)
                                  : 0.0;
        }
        if (j->hermitian) {
            for (int64_t t = given; t <= n / 2; ++t) line[t] = (cpx){0.0, 0.0};
            for (int64_t t = n / 2 + 1; t < n; ++t)
                line[t] = (cpx){line[n - t].re, -line[n - t].im};
        } else {
            for (int64_t t = given; t < n; ++t) line[t] = (cpx){0.0, 0.0};
        }
        execute(plan, line, spectrum, work);
        for (int64_t k = 0; k < j->n_out; ++k) {
            cpx a = spectrum[k], b;
            if (pair) {
                split_pair(spectrum, n, k, &a, &b);
                store(j->y, j->f32, out_base2 + k * out_step, b.re * j->scale);
                store(j->y, j->f32, out_base2 + k * out_step + 1, b.im * j->scale);
            }
            store(j->y, j->f32, out_base + k * out_step, a.re * j->scale);
            if (cout == 2) store(j->y, j->f32, out_base + k * out_step + 1, a.im * j->scale);
        }
        l += pair ? 2 : 1;
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
    for (int64_t l = begin; l < end;) {
        const int pair = cin == 1 && l + 1 < end; /* two real frames at once */
        const int64_t base = ((l / j->frames) * j->length + (l % j->frames) * j->step) * cin;
        const int64_t base2 =
            pair ? ((l + 1) / j->frames * j->length + (l + 1) % j->frames * j->step) * cin : 0;
        for (int64_t t = 0; t < n; ++t) {
            const double w = load(j->window, j->f32, t);
            line[t].re = load(j->x, j->f32, base + t * cin) * w;
            line[t].im = (cin == 2 ? load(j->x, j->f32, base + t * cin + 1)
                          : pair   ? load(j->x, j->f32, base2 + t)
                                   : 0.0) * w;
        }
        execute(plan, line, spectrum, work);
        float *y32 = (float *)j->y + l * j->n_out * 2;
        double *y64 = (double *)j->y + l * j->n_out * 2;
        for (int64_t k = 0; k < j->n_out; ++k) {
            cpx a = spectrum[k], b;
            if (pair) {
                split_pair(spectrum, n, k, &a, &b);
                const int64_t at = (j->n_out + k) * 2; /* frame l + 1 */
                if (j->f32) {
                    y32[at] = (float)b.re;
                    y32[at + 1] = (float)b.im;
                } else {
                    y64[at] = b.re;
                    y64[at + 1] = b.im;
                }
            }
            if (j->f32) {
                y32[2 * k] = (float)a.re;
                y32[2 * k + 1] = (float)a.im;
            } else {
                y64[2 * k] = a.re;
                y64[2 * k + 1] = a.im;
            }
        }
        l += pair ? 2 : 1;
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
