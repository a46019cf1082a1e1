/* y = x @ W.T (* scale) (+ bias) for the few rows of a decode step, on W packed once.
 *
 * A decode step multiplies a handful of rows x [rows, in] by each weight W [out, in]: each
 * weight is read once and used for one multiply-add per row, so the product is bound by the
 * time to read W from memory (chapter 09). This kernel reads W in a layout made for that: W is
 * packed once into blocks of LANES output rows, block[i][l] = W[blk * LANES + l][i], so one
 * vector load brings the i-th weight of LANES outputs, and each row of x adds x[r][i] times it
 * into LANES running sums. The weights stream from memory in order, each is converted to float
 * once (bfloat16 and int8 weights too) and used for every row, and no horizontal sums are
 * needed. Threads (OpenMP) split the blocks.
 *
 * With AVX512_VNNI, int8 weights take a third layout (quads, below): the products are integer
 * multiply-adds on the weights' own bytes, with no conversion of the weights at all. With AVX2
 * and no AVX-512, a fourth (words, below): int8 weights in pairs of inputs, multiplied as 16-bit
 * integers.
 *
 * Portable C: GCC/Clang vector extensions, LANES floats per vector (16 with AVX-512, else 8),
 * built by minimodel/kernels/native.py with -O3 -march=native. Sums are in float32, in another
 * order than a BLAS's, so results equal F.linear's within float tolerance, not bit for bit.
 */
#include "mm.h"
#include <math.h>

#if defined(__AVX512BF16__) && defined(__AVX512F__)
/* AVX512_BF16: one instruction multiplies 16 pairs of bfloat16 and adds each pair's two
 * products into a float32 lane. For it, bfloat16 and int8 weights are packed in pairs of inputs:
 * block[i / 2][l][i % 2] = W[blk * LANES + l][i], and x is read two inputs at a time. */
#define PAIRS 1
static inline __m512bh load_pairs_bf16(const void *p) {
    return (__m512bh)_mm512_loadu_si512(p);
}
static inline __m512bh load_pairs_i8(const void *p) {  /* int8 is exact in bfloat16 */
    __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
    __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p + 1)));
    return _mm512_cvtne2ps_pbh(hi, lo);
}
#else
#define PAIRS 0
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512F__)
/* AVX512_VNNI: one instruction multiplies 64 pairs of (unsigned byte, signed byte) and adds each
 * four products into an int32 lane. For it, int8 weights are packed in quads of inputs,
 * block[i / 4][l][i % 4] = W[blk * LANES + l][i], followed by each output's sum of weights.
 *
 * The weights stay int8, and the activations are not rounded to 8 bits: each row is written as
 * P signed bytes per input with power-of-two scales s_k = 2^(E - 7k), E the least with
 * max|x| <= 127 * 2^E:
 *     x = s0 * a0 + s1 * a1 (+ s2 * a2) + e,   a_k integers in [-127, 127],  |e| <= s_(P-1) / 2.
 * A bfloat16 value has 8 significant bits: with P = 2 it is exact when it is at least 1/32 of
 * the row's largest, and otherwise off by at most 2^-14 of the largest (no more than a bfloat16
 * rounding of a value 1/32 of the largest). A float32 value, with P = 3, is off by at most
 * 2^-21 of the largest. Then
 *     x . w = sum_k s_k * (a_k . w) = sum_k s_k * ((a_k + 128) . w - 128 * sum(w)),
 * with a_k + 128 an unsigned byte, and each integer sum is exact in int32 for up to 65,536
 * inputs (|(a_k + 128) . w| <= 255 * 128 * in). P integer products per 64 weights cost less
 * than converting the 64 weights to floats. */
#define QUADS 1
#define QMAX_IN 65536
#else
#define QUADS 0
#define QMAX_IN 0
#endif

#if defined(__AVX2__) && !defined(__AVX512F__)
/* AVX2: one instruction (vpmaddwd) multiplies 16 pairs of 16-bit integers and adds each pair's
 * two products into an int32 lane. For it, int8 weights are packed in pairs of inputs, WGROUP
 * blocks side by side (block[i / 2][b][l][i % 2] = W[(group * WGROUP + b) * LANES + l][i]: the
 * WGROUP blocks' next pair is one cache line), and each 16 bytes are widened to 16-bit words as
 * they are read: one widening per 16 weights, where floats take two conversions per 8.
 *
 * For bfloat16 activations: each row is written as 16-bit integers with a power-of-two scale
 * s = 2^E, E the least with max|x| <= 32767 * 2^E: x = s * a + e, a in [-32767, 32767],
 * |e| <= s / 2 < max|x| / 32767. A bfloat16 value (8 significant bits) is exact when it is at
 * least 1/64 of the row's largest. Each pair's sum is at most 2 * 128 * 32767 in size, so 256
 * pairs add up exactly in int32 (WCHUNK); the chunks' sums add up in float32. (Float32
 * activations keep the plain layout: exact enough for them would take two words an input,
 * slower than widening the weights to floats at two rows or more, measured.)
 */
#define WORDS 1
#define WCHUNK 256
#define WAHEAD 64  /* pairs of inputs read ahead of the products: 10-15% faster (measured) */
#else
#define WORDS 0
#endif
enum { PLAIN = 0, PAIRED = 1, QUADRUPLED = 2, WORDED = 3 };  /* the layouts of a packed weight */
#define WGROUP 4  /* blocks side by side in words (1, 2 and 8 read slower, measured) */

/* The interface's version: native.py checks it. */
int mm_abi(void) { return 7; }

int mm_lanes(void) { return LANES; }

/* 1 when bfloat16 and int8 weights can be packed in pairs for bfloat16 activations. */
int mm_has_pairs(void) { return PAIRS; }

/* The most inputs an int8 weight packed in quads may have; 0 where there are no quads. */
int mm_quads_max_in(void) { return QMAX_IN; }

/* 1 when int8 weights can be packed in pairs for 16-bit integer products (words). */
int mm_has_words(void) { return WORDS; }

/* Inputs per weight row once packed: rounded up to the pair or the quad */
static inline int padded_in(int layout, int in) {
    return layout == PAIRED || layout == WORDED ? (in + 1) / 2 * 2
           : layout == QUADRUPLED ? (in + 3) / 4 * 4 : in;
}

/* Blocks of W packed: ceil(out / LANES), in words rounded up to whole groups */
static inline size_t packed_blocks(int layout, int out) {
    size_t blocks = (size_t)(out + LANES - 1) / LANES;
    return layout == WORDED ? (blocks + WGROUP - 1) / WGROUP * WGROUP : blocks;
}

/* Where block blk starts in W packed, its inputs padded to inp, s bytes a weight: blocks one
 * after the other, or in words WGROUP blocks side by side, a pair of inputs apart */
static inline size_t block_at(int layout, int blk, int inp, int s) {
    return layout == WORDED
               ? (size_t)(blk / WGROUP) * WGROUP * inp * LANES + (size_t)(blk % WGROUP) * 2 * LANES
               : (size_t)blk * inp * LANES * s;
}

/* Bytes of W packed: packed_blocks blocks of [in][LANES] (in rounded up to the pair or the
 * quad), zero-padded; in quads, then one int32 sum of weights per (padded) output. */
size_t mm_packed_bytes(int wk, int layout, int out, int in) {
    size_t blocks = packed_blocks(layout, out);
    return blocks * padded_in(layout, in) * LANES * SIZE[wk]
           + (layout == QUADRUPLED ? blocks * LANES * 4 : 0);
}

/* packed[blk][i][l] = w[blk * LANES + l][i]; in pairs packed[blk][i / 2][l][i % 2]; in quads
 * packed[blk][i / 4][l][i % 4] and then sums[o] = sum_i w[o][i]; in words, WGROUP blocks side by
 * side, packed[blk / WGROUP][i / 2][blk % WGROUP][l][i % 2] (the last group zero-padded) */
void mm_pack(const void *w, int wk, int layout, int out, int in, void *packed, int threads) {
    int blocks = (int)packed_blocks(layout, out), s = SIZE[wk], inp = padded_in(layout, in);
    int group = layout == PAIRED || layout == WORDED ? 2 : layout == QUADRUPLED ? 4 : 1;
    int32_t *sums = (int32_t *)((char *)packed + (size_t)blocks * inp * LANES * s);
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
        char *dst = (char *)packed + block_at(layout, blk, inp, s);
        /* groups of inputs are this many blocks apart */
        const size_t step = layout == WORDED ? WGROUP : 1;
        for (int i = 0; i < inp; i++)
            for (int l = 0; l < LANES; l++) {
                int o = blk * LANES + l;
                size_t at = ((size_t)(i / group) * LANES * step + l) * group + i % group;
                if (o < out && i < in) memcpy(dst + at * s, (const char *)w + ((size_t)o * in + i) * s, s);
                else memset(dst + at * s, 0, s);
            }
        if (layout == QUADRUPLED)
            for (int l = 0; l < LANES; l++) {
                int o = blk * LANES + l, sum = 0;
                for (int i = 0; o < out && i < in; i++) sum += ((const int8_t *)w)[(size_t)o * in + i];
                sums[o] = sum;
            }
    }
}

/* Bytes of a block read ahead of the products, a cache line at a time, at two rows or more: the
 * kernels of 2-8 rows take one or two blocks at once, too few streams for the CPU's own
 * prefetching to keep memory busy (at one row, eight blocks at once do). 3-13% faster at 2-8
 * rows of float32 streaming from memory on AVX2 (scripts/bench_gemv_builds.py; 2048 and 4096
 * bytes ahead gained less). */
#define AHEAD 3072
/* NB blocks of LANES outputs, RB rows of x (xst floats apart): acc[b][r] += W[blk b][i][:] *
 * x[r][i] */
#define KERNEL(NAME, LOAD, S, NB, RB) \
static void NAME##_##NB##_##RB(const void *xv, int in, int xst, const char *wp, vf *out) { \
    const float *x = xv; \
    vf acc[NB][RB]; \
    for (int b = 0; b < NB; b++) for (int r = 0; r < RB; r++) acc[b][r] = (vf){0}; \
    const size_t bstride = (size_t)in * LANES * S; \
    for (int i = 0; i < in; i++) { \
        for (int b = 0; b < NB; b++) { \
            const char *p = wp + b * bstride + (size_t)i * LANES * S; \
            if (RB > 1 && (i * LANES * S) % 64 == 0) __builtin_prefetch(p + AHEAD); \
            vf w = LOAD(p); \
            for (int r = 0; r < RB; r++) acc[b][r] += w * x[(size_t)r * xst + i]; \
        } \
    } \
    for (int b = 0; b < NB; b++) for (int r = 0; r < RB; r++) out[b * RB + r] = acc[b][r]; \
}
/* The same on pairs: x is bfloat16 [RB][in] with in even, read as 32-bit pairs (xst: unused,
 * the rows are in apart) */
#define PKERNEL(NAME, LOAD, S, NB, RB) \
static void NAME##_##NB##_##RB(const void *xv, int in, int xst, const char *wp, vf *out) { \
    const uint32_t *x = xv; \
    (void)xst; \
    __m512 acc[NB][RB]; \
    for (int b = 0; b < NB; b++) for (int r = 0; r < RB; r++) acc[b][r] = _mm512_setzero_ps(); \
    const size_t bstride = (size_t)in * LANES * S, half = (size_t)in / 2; \
    for (size_t i = 0; i < half; i++) { \
        __m512bh xb[RB]; \
        for (int r = 0; r < RB; r++) xb[r] = (__m512bh)_mm512_set1_epi32((int)x[r * half + i]); \
        for (int b = 0; b < NB; b++) { \
            __m512bh w = LOAD(wp + b * bstride + i * 2 * LANES * S); \
            for (int r = 0; r < RB; r++) acc[b][r] = _mm512_dpbf16_ps(acc[b][r], w, xb[r]); \
        } \
    } \
    for (int b = 0; b < NB; b++) for (int r = 0; r < RB; r++) out[b * RB + r] = (vf)acc[b][r]; \
}
#if QUADS
/* The same on quads: x is [RB][P][in / 4] quads of unsigned bytes (a_k + 128), s [RB][P] the
 * rows' scales s_k, sums the blocks' sums of weights; out gets the float sums. */
#define QKERNEL(NAME, P, NB, RB) \
static void NAME##_##NB##_##RB(const uint32_t *x, int in, const char *wp, const int32_t *sums, \
                               const float *s, vf *out) { \
    __m512i acc[NB][RB][P]; \
    for (int b = 0; b < NB; b++) for (int r = 0; r < RB; r++) for (int k = 0; k < P; k++) \
        acc[b][r][k] = _mm512_setzero_si512(); \
    const size_t bstride = (size_t)in * LANES, quads = (size_t)in / 4; \
    for (size_t i = 0; i < quads; i++) { \
        __m512i xb[RB][P]; \
        for (int r = 0; r < RB; r++) for (int k = 0; k < P; k++) \
            xb[r][k] = _mm512_set1_epi32((int)x[(r * P + k) * quads + i]); \
        for (int b = 0; b < NB; b++) { \
            __m512i w = _mm512_loadu_si512(wp + b * bstride + i * 4 * LANES); \
            for (int r = 0; r < RB; r++) for (int k = 0; k < P; k++) \
                acc[b][r][k] = _mm512_dpbusd_epi32(acc[b][r][k], xb[r][k], w); \
        } \
    } \
    for (int b = 0; b < NB; b++) { \
        __m512i off = _mm512_slli_epi32(_mm512_loadu_si512(sums + b * LANES), 7); \
        for (int r = 0; r < RB; r++) { \
            __m512 y = _mm512_setzero_ps(); \
            for (int k = 0; k < P; k++) \
                y = _mm512_fmadd_ps(_mm512_set1_ps(s[r * P + k]), \
                                    _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[b][r][k], off)), y); \
            out[b * RB + r] = (vf)y; \
        } \
    } \
}
/* One block at a time: blocks side by side are streams 16 * in bytes apart, which on int8 read
 * slower than one stream (measured); as many rows at a time as the registers hold P running
 * sums for (QROWS_OF). q2 for bfloat16 activations (P = 2), q3 for float32 (P = 3). */
#define QKERNELS(NAME, P) \
QKERNEL(NAME, P, 1, 1) QKERNEL(NAME, P, 1, 2) QKERNEL(NAME, P, 1, 3) QKERNEL(NAME, P, 1, 4) \
QKERNEL(NAME, P, 1, 5) QKERNEL(NAME, P, 1, 6) QKERNEL(NAME, P, 1, 7) QKERNEL(NAME, P, 1, 8)
QKERNELS(q2, 2)
QKERNELS(q3, 3)
typedef void (*qfn)(const uint32_t *, int, const char *, const int32_t *, const float *, vf *);
#define QROWS 8
#define QROWS_OF(P) ((P) == 2 ? 8 : 4)  /* rows at once: 16 or 12 running sums */
static const qfn QONE[2][QROWS + 1] = {
    {0, q2_1_1, q2_1_2, q2_1_3, q2_1_4, q2_1_5, q2_1_6, q2_1_7, q2_1_8},
    {0, q3_1_1, q3_1_2, q3_1_3, q3_1_4, q3_1_5, q3_1_6, q3_1_7, q3_1_8}};

/* Each row of x [rows][in] (kind xk) as P bytes per input, q [rows][P][inq] (a_k + 128, padded
 * with 128: zero), and its P scales s [rows][P]. A row holding inf or NaN gets NaN scales, so
 * its outputs are NaN. Every step is exact in float32: the scales are powers of two, and each
 * rest is what is left below the bits a byte took. */
static void split_rows(const void *x, int xk, int P, int rows, int in, int inq, uint8_t *q,
                       float *s) {
    for (int r = 0; r < rows; r++) {
        const size_t at = (size_t)r * in;
        __m512 mv = _mm512_setzero_ps();
        __mmask16 odd = 0;
        int i = 0;
        for (; i + LANES <= in; i += LANES) {
            __m512 v = (__m512)load_kind(x, xk, at + i);
            odd |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
            mv = _mm512_max_ps(mv, _mm512_abs_ps(v));
        }
        float m = _mm512_reduce_max_ps(mv);
        for (; i < in; i++) {
            float v = fabsf(get(x, xk, at + i));
            if (v != v) odd = 1;
            m = v > m ? v : m;
        }
        uint8_t *row = q + (size_t)r * P * inq;
        memset(row, 128, (size_t)P * inq);
        if (odd || !isfinite(m)) {
            for (int k = 0; k < P; k++) s[r * P + k] = NAN;
            continue;
        }
        if (!(m > 0)) {
            for (int k = 0; k < P; k++) s[r * P + k] = 0;
            continue;
        }
        int E = 0;  /* the least E with m <= 127 * 2^E */
        frexpf(m / 127, &E);
        while (ldexpf(127, E - 1) >= m) E--;
        while (ldexpf(127, E) < m) E++;
        float up[3], down[3];  /* 2^(7k - E), 2^(E - 7k) */
        for (int k = 0; k < P; k++) {
            up[k] = ldexpf(1, 7 * k - E);
            down[k] = s[r * P + k] = ldexpf(1, E - 7 * k);
        }
        const __m512 hi = _mm512_set1_ps(127), lo = _mm512_set1_ps(-127);
        for (i = 0; i + LANES <= in; i += LANES) {
            __m512 rest = (__m512)load_kind(x, xk, at + i);
            for (int k = 0; k < P; k++) {
                __m512 a = _mm512_roundscale_ps(_mm512_mul_ps(rest, _mm512_set1_ps(up[k])),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                a = _mm512_min_ps(_mm512_max_ps(a, lo), hi);
                __m512i u = _mm512_add_epi32(_mm512_cvtps_epi32(a), _mm512_set1_epi32(128));
                _mm_storeu_si128((__m128i *)(row + (size_t)k * inq + i), _mm512_cvtepi32_epi8(u));
                rest = _mm512_fnmadd_ps(a, _mm512_set1_ps(down[k]), rest);
            }
        }
        for (; i < in; i++) {
            float rest = get(x, xk, at + i);
            for (int k = 0; k < P; k++) {
                float a = nearbyintf(rest * up[k]);
                a = a > 127 ? 127 : a < -127 ? -127 : a;
                row[(size_t)k * inq + i] = (uint8_t)(a + 128);
                rest -= a * down[k];
            }
        }
    }
}
#endif

#if WORDS
/* The products on words: x is [RB][in / 2] pairs of 16-bit integers (read as 32 bits), s [RB]
 * the rows' scales; NB blocks at once, within one group or whole groups side by side (8 blocks
 * at one row: two groups, two streams from memory, read faster than one); out gets the float
 * sums. */
#define WKERNEL(NB, RB) \
static void w_##NB##_##RB(const uint32_t *x, int in, const char *wp, const float *s, vf *out) { \
    for (int j = 0; j < NB * RB; j++) out[j] = (vf){0}; \
    enum { STREAMS = (NB + WGROUP - 1) / WGROUP, STEP = WGROUP * 2 * LANES }; \
    const size_t pairs = (size_t)in / 2, gstride = (size_t)in * WGROUP * LANES; \
    for (size_t c = 0; c < pairs; c += WCHUNK) { \
        const size_t end = c + WCHUNK < pairs ? c + WCHUNK : pairs; \
        __m256i acc[NB][RB]; \
        for (int b = 0; b < NB; b++) for (int r = 0; r < RB; r++) \
            acc[b][r] = _mm256_setzero_si256(); \
        for (size_t i = c; i < end; i++) { \
            for (int t = 0; t < STREAMS; t++) \
                _mm_prefetch(wp + t * gstride + (i + WAHEAD) * STEP, _MM_HINT_T0); \
            __m256i xb[RB]; \
            for (int r = 0; r < RB; r++) xb[r] = _mm256_set1_epi32((int)x[r * pairs + i]); \
            for (int b = 0; b < NB; b++) { \
                const char *p = wp + block_at(WORDED, b, in, 1); \
                __m256i w = _mm256_cvtepi8_epi16( \
                    _mm_loadu_si128((const __m128i *)(p + i * STEP))); \
                for (int r = 0; r < RB; r++) \
                    acc[b][r] = _mm256_add_epi32(acc[b][r], _mm256_madd_epi16(w, xb[r])); \
            } \
        } \
        for (int b = 0; b < NB; b++) for (int r = 0; r < RB; r++) \
            out[b * RB + r] = (vf)_mm256_fmadd_ps(_mm256_set1_ps(s[r]), \
                                                  _mm256_cvtepi32_ps(acc[b][r]), \
                                                  (__m256)out[b * RB + r]); \
    } \
}
/* as many blocks at once as 8 running sums allow; 4 rows at a time (more read slower, measured) */
WKERNEL(8, 1) WKERNEL(4, 2) WKERNEL(2, 3) WKERNEL(2, 4)
WKERNEL(1, 1) WKERNEL(1, 2) WKERNEL(1, 3) WKERNEL(1, 4)
typedef void (*wfn)(const uint32_t *, int, const char *, const float *, vf *);
#define WROWS 4
static const wfn WONE[WROWS + 1] = {0, w_1_1, w_1_2, w_1_3, w_1_4};
static const wfn WMANY[WROWS + 1] = {0, w_8_1, w_4_2, w_2_3, w_2_4};
static const int WNB[WROWS + 1] = {0, 8, 4, 2, 2};

/* Each row of x [rows][in] (bfloat16) as words, q [rows][inp] (zero-padded), and its scale
 * s [rows]. A row holding inf or NaN gets a NaN scale, so its outputs are NaN. Every step is
 * exact: a bfloat16 value times a power of two is rounded to an integer. A row so small that
 * 2^-E overflows a float is done in double. */
static void split_words(const uint16_t *x, int rows, int in, int inp, int16_t *q, float *s) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int r = 0; r < rows; r++) {
        const size_t at = (size_t)r * in;
        __m256 mv = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
        int i = 0;
        for (; i + LANES <= in; i += LANES) {
            __m256 v = (__m256)load_bf16(x + at + i);
            odd = _mm256_or_ps(odd, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            mv = _mm256_max_ps(mv, _mm256_and_ps(v, absmask));
        }
        float lanes[LANES], m = 0;
        _mm256_storeu_ps(lanes, mv);
        for (int l = 0; l < LANES; l++) m = lanes[l] > m ? lanes[l] : m;
        int nan = _mm256_movemask_ps(odd) != 0;
        for (; i < in; i++) {
            float v = fabsf(bf16_f32(x[at + i]));
            if (v != v) nan = 1;
            m = v > m ? v : m;
        }
        int16_t *row = q + (size_t)r * inp;
        memset(row, 0, (size_t)inp * sizeof *row);
        if (nan || !isfinite(m) || !(m > 0)) {
            s[r] = nan || !isfinite(m) ? NAN : 0;
            continue;
        }
        int E = 0;  /* the least E with m <= 32767 * 2^E */
        frexpf(m / 32767, &E);
        while (ldexp(32767, E - 1) >= m) E--;
        while (ldexp(32767, E) < m) E++;
        s[r] = ldexpf(1, E);
        if (-E > 127) {  /* 2^-E is no float: in double */
            for (i = 0; i < in; i++) row[i] = (int16_t)nearbyint(ldexp(bf16_f32(x[at + i]), -E));
            continue;
        }
        const float upf = ldexpf(1, -E);
        const __m256 up = _mm256_set1_ps(upf);
        for (i = 0; i + LANES <= in; i += LANES) {
            __m256 a = _mm256_round_ps(_mm256_mul_ps((__m256)load_bf16(x + at + i), up),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m256i ai = _mm256_cvtps_epi32(a);
            _mm_storeu_si128((__m128i *)(row + i), _mm_packs_epi32(
                _mm256_castsi256_si128(ai), _mm256_extracti128_si256(ai, 1)));
        }
        for (; i < in; i++) row[i] = (int16_t)nearbyintf(bf16_f32(x[at + i]) * upf);
    }
}
#endif

/* for each RB of 1..8 rows: NB blocks at once (more blocks, fewer rows), and one block */
/* NB_r: the blocks a kernel of r rows takes at once, as many running sums as the registers hold
 * (32 vector registers with AVX-512, 16 with AVX2); GROUP: blocks per thread's task, a multiple
 * of each */
#if LANES == 16
#define NB_1 8
#define NB_2 4
#define NB_3 4
#define NB_4 4
#define NB_5 2
#define NB_6 2
#define NB_7 2
#define NB_8 2
#define GROUP 8
#else  /* at one and two rows, 8 running sums as with AVX-512: more streams from memory read
        * faster (measured) */
#define NB_1 8
#define NB_2 4
#define NB_3 2
#define NB_4 2
#define NB_5 1
#define NB_6 1
#define NB_7 1
#define NB_8 1
#define GROUP 8
#endif
#if WORDS && (GROUP % WGROUP || GROUP % 8)
#error "a thread's task must hold whole groups of words and whole calls of 8 blocks"
#endif
static const int NBLOCKS[9] = {0, NB_1, NB_2, NB_3, NB_4, NB_5, NB_6, NB_7, NB_8};
#define KERNELS(K, NAME, LOAD, S) \
K(NAME, LOAD, S, NB_1, 1) K(NAME, LOAD, S, NB_2, 2) K(NAME, LOAD, S, NB_3, 3) \
K(NAME, LOAD, S, NB_4, 4) K(NAME, LOAD, S, NB_5, 5) K(NAME, LOAD, S, NB_6, 6) \
K(NAME, LOAD, S, NB_7, 7) K(NAME, LOAD, S, NB_8, 8) \
K(NAME, LOAD, S, 1, 1) K(NAME, LOAD, S, 1, 2) K(NAME, LOAD, S, 1, 3) K(NAME, LOAD, S, 1, 4) \
K(NAME, LOAD, S, 1, 5) K(NAME, LOAD, S, 1, 6) K(NAME, LOAD, S, 1, 7) K(NAME, LOAD, S, 1, 8)
KERNELS(KERNEL, kf, load_f32, 4)
KERNELS(KERNEL, kh, load_bf16, 2)
KERNELS(KERNEL, kb, load_i8, 1)
#if PAIRS
KERNELS(PKERNEL, ph, load_pairs_bf16, 2)
KERNELS(PKERNEL, pb, load_pairs_i8, 1)
#endif

typedef void (*kfn)(const void *, int, int, const char *, vf *);

/* y[r][o] = sum_i x[r][i] * w[o][i] (* scale[o]) (+ bias[o]); x and y (and bias) of kind xk
 * (F32 or BF16), W of kind wk packed by mm_pack in the given layout, scale (I8 only) of kind sk.
 * Returns 0; 1 on bad arguments, 2 when out of memory. */
int mm_gemv(const void *x, int xk, const void *packed, int wk, int layout, const void *scale,
            int sk, const void *bias, void *y, int rows, int in, int out, int threads) {
    if (rows < 1 || in < 1 || out < 1 || (xk != F32 && xk != BF16) || wk < F32 || wk > I8 ||
        (wk == I8 && !scale) || layout < PLAIN || layout > WORDED ||
        (layout == PAIRED && (!PAIRS || xk != BF16 || wk == F32)) ||
        (layout == QUADRUPLED && (!QUADS || wk != I8 || in > QMAX_IN)) ||
        (layout == WORDED && (!WORDS || wk != I8 || xk != BF16)))
        return 1;
    kfn many[9], one[9];
#define SET(N) \
    many[1] = N##_NB_1_1; many[2] = N##_NB_2_2; many[3] = N##_NB_3_3; many[4] = N##_NB_4_4; \
    many[5] = N##_NB_5_5; many[6] = N##_NB_6_6; many[7] = N##_NB_7_7; many[8] = N##_NB_8_8; \
    one[1] = N##_1_1; one[2] = N##_1_2; one[3] = N##_1_3; one[4] = N##_1_4; \
    one[5] = N##_1_5; one[6] = N##_1_6; one[7] = N##_1_7; one[8] = N##_1_8;
    /* x as the kernels read it: float32; bfloat16 padded to even inputs for pairs; P bytes per
     * input (P = 3 for float32, 2 for bfloat16) and P scales per row for quads; a word per input
     * (padded to even inputs) and a scale per row for words */
    const int inp = padded_in(layout, in), quads = layout == QUADRUPLED,
              words = layout == WORDED, P = quads ? (xk == F32 ? 3 : 2) : 1;
    /* float32 rows of x, as the plain kernels read them: an odd number of cache lines apart, so
     * that the rows' i-th inputs fall in 8 different sets of L1 (rows 4 KiB apart, as with 1024
     * inputs, share one: 20% slower at 8 rows, measured) */
    const int xst = layout == PLAIN ? ((inp + 15) / 16 | 1) * 16 : inp;
    const size_t xrow = quads ? (size_t)P * inp
                        : layout == PLAIN ? (size_t)xst * 4 : (size_t)inp * 2;
    const size_t scales = quads || words ? (size_t)rows * P * sizeof(float) : 0;
    void *xs = malloc((size_t)rows * xrow + scales);
    if (!xs) return 2;
    float *qs = (float *)((char *)xs + (size_t)rows * xrow);
    if (quads) {
#if QUADS
        split_rows(x, xk, P, rows, in, inp, xs, qs);
#endif
    } else if (words) {
#if WORDS
        split_words(x, rows, in, inp, xs, qs);
#endif
    } else if (layout == PAIRED) {
        uint16_t *xh = xs;
        for (int r = 0; r < rows; r++) {
            memcpy(xh + (size_t)r * inp, (const uint16_t *)x + (size_t)r * in, (size_t)in * 2);
            if (inp > in) xh[(size_t)r * inp + in] = 0;
        }
#if PAIRS
        if (wk == BF16) { SET(ph) } else { SET(pb) }
#endif
    } else {
        float *xf = xs;
        for (int r = 0; r < rows; r++)
            for (int i = 0; i < in; i++)
                xf[(size_t)r * xst + i] = get(x, xk, (size_t)r * in + i);
        if (wk == F32) { SET(kf) } else if (wk == BF16) { SET(kh) } else { SET(kb) }
    }
    const int blocks = (out + LANES - 1) / LANES, s = SIZE[wk];
    const size_t bstride = (size_t)inp * LANES * s;
    const int32_t *sums = (const int32_t *)((const char *)packed + blocks * bstride);
    (void)sums; (void)qs;  /* read by the quads' and words' kernels, where the CPU has them */
    const int group = GROUP;
    const int tasks = (blocks + group - 1) / group;
    if ((size_t)blocks * bstride < (384u << 10)) threads = 1;  /* waking a thread costs more */
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < tasks; t++) {
        vf acc[16];
        int b0 = t * group, b1 = b0 + group < blocks ? b0 + group : blocks;
        int most = 8;
#if QUADS
        if (quads) most = QROWS_OF(P);
#endif
#if WORDS
        if (words) most = WROWS;
#endif
        for (int r0 = 0; r0 < rows; r0 += most) {
            int rb = rows - r0 < most ? rows - r0 : most;
            int nb = quads ? 1 : NBLOCKS[rb];
#if WORDS
            if (words) nb = WNB[rb];
#endif
            for (int b = b0; b < b1;) {
                int n = b + nb <= b1 ? nb : 1;
                const char *wp = (const char *)packed + block_at(layout, b, inp, s);
                if (quads) {
#if QUADS
                    QONE[P - 2][rb](
                        (const uint32_t *)((const char *)xs + r0 * xrow), inp, wp,
                        sums + b * LANES, qs + r0 * P, acc);
#endif
                } else if (words) {
#if WORDS
                    (n == 1 ? WONE : WMANY)[rb](
                        (const uint32_t *)((const char *)xs + r0 * xrow), inp, wp, qs + r0, acc);
#endif
                } else {
                    (n == 1 ? one : many)[rb]((const char *)xs + r0 * xrow, inp, xst, wp, acc);
                }
                for (int k = 0; k < n; k++) for (int r = 0; r < rb; r++) {
                    int o0 = (b + k) * LANES;
                    size_t at = (size_t)(r0 + r) * out + o0;
                    if (o0 + LANES <= out) {  /* a whole block: on vectors */
                        vf v = acc[k * rb + r];
                        if (wk == I8) v *= load_kind(scale, sk, o0);
                        if (bias) v += load_kind(bias, xk, o0);
                        if (xk == F32) memcpy((float *)y + at, &v, sizeof v);
                        else store_bf16((uint16_t *)y + at, v);
                        continue;
                    }
                    for (int l = 0; l < LANES && o0 + l < out; l++) {
                        float v = acc[k * rb + r][l];
                        if (wk == I8) v *= get(scale, sk, o0 + l);
                        if (bias) v += get(bias, xk, o0 + l);
                        if (xk == F32) ((float *)y)[at + l] = v;
                        else ((uint16_t *)y)[at + l] = f32_bf16(v);
                    }
                }
                b += n;
            }
        }
    }
    free(xs);
    return 0;
}
