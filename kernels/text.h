/* tfidf_vectorizer: counts of a pool's n-grams in rows of integer tokens, as ONNX
 * TfIdfVectorizer (relvm/ops/text.py gives the rules). */
#ifndef RELVM_TEXT_H
#define RELVM_TEXT_H
#include <stdint.h>

enum relvm_tfidf_mode { RELVM_TFIDF_TF, RELVM_TFIDF_IDF, RELVM_TFIDF_TFIDF };

/* y (rows, width) float32 from x (rows, cols) int64 or int32 tokens (dtype: a relvm_dtype
 * code). The pool's counted n-grams of k tokens, k = min_n .. max_n, are table_count[k - min_n]
 * rows of k tokens at grams + table_start[k - min_n], sorted (lexicographically, as int64),
 * none twice; row r of them counts in column columns[table_first[k - min_n] + r] (< width).
 * weights: width entries, or NULL (no weights). Returns RELVM_UNSUPPORTED for arguments out of
 * range. */
int relvm_tfidf_vectorizer(int dtype, int64_t rows, int64_t cols, const void *x, int mode,
                           int64_t min_n, int64_t max_n, int64_t max_skip, const int64_t *grams,
                           const int64_t *table_start, const int64_t *table_count,
                           const int64_t *table_first, const int64_t *columns,
                           const double *weights, int64_t width, float *y);
#endif
