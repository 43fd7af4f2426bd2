/* signal.dft and signal.stft (relvm/ops/signal.py): discrete Fourier transforms of lines of
 * real or complex (re, im interleaved) float32/float64 data, computed in double. */
#ifndef RELVM_FFT_H
#define RELVM_FFT_H
#include <stdint.h>

/* A complex DFT of one length and direction, made once per shape and shared by every call and
 * thread (it is read only): mixed-radix Cooley-Tukey (radix 4, 2, 3, 5 and any odd radix up to
 * RELVM_FFT_MAX_RADIX) over a table of the n twiddles, or, when n has a larger prime factor,
 * Bluestein's chirp-z transform through a power-of-two plan. */
struct relvm_fft_plan;

/* The plan of y[k] = sum_t x[t] exp(-+2 pi i k t / n) (the sign + when inverse, unscaled), or
 * NULL when memory runs out or n < 1. Free it with relvm_fft_plan_free. */
struct relvm_fft_plan *relvm_fft_plan_new(int64_t n, int inverse);
void relvm_fft_plan_free(struct relvm_fft_plan *plan);
/* 1 if the plan runs Bluestein's algorithm, 0 if Cooley-Tukey (for tests). */
int relvm_fft_plan_bluestein(const struct relvm_fft_plan *plan);

/* signal.dft over lines: x is (outer, n_in, inner, channels_in), y (outer, n_out, inner,
 * channels_out); channels 1 (real) or 2 (re, im). Each line of x along n_in is cut or padded
 * with zeros to the plan's length L, transformed, multiplied by scale and its first n_out
 * (<= L) bins written. With hermitian (an inverse real FFT: channels_in 2, channels_out 1) a
 * line holds the bins 0..L/2 of a spectrum with Hermitian symmetry (those past n_in are 0, the
 * rest follow by symmetry) and y the real part of its transform. Threaded over lines. */
int relvm_dft(int dtype, const struct relvm_fft_plan *plan, int64_t outer, int64_t n_in,
              int64_t inner, int channels_in, int64_t n_out, int channels_out, int hermitian,
              double scale, const void *x, void *y);

/* signal.stft: x is (batch, length, channels_in), window (L) of x's dtype, L the plan's
 * length; y (batch, frames, bins, 2) holds the DFT of each frame x[b, f * step + t] * window[t]
 * (t < L), its first bins (<= L) bins. Frames must fit: (frames - 1) * step + L <= length.
 * Threaded over frames. */
int relvm_stft(int dtype, const struct relvm_fft_plan *plan, int64_t batch, int64_t length,
               int channels_in, int64_t frames, int64_t step, int64_t bins, const void *window,
               const void *x, void *y);
#endif
