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
 * Portable C: GCC/Clang vector extensions, LANES floats per vector (16 with AVX-512, else 8),
 * built by minimodel/kernels/native.py with -O3 -march=native. Sums are in float32, in another
 * order than a BLAS's, so results equal F.linear's within float tolerance, not bit for bit.
 */
#include "mm.h"

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

/* The interface's version: native.py checks it. */
int mm_abi(void) { return 3; }

int mm_lanes(void) { return LANES; }

/* 1 when bfloat16 and int8 weights can be packed in pairs for bfloat16 activations. */
int mm_has_pairs(void) { return PAIRS; }

/* Bytes of W packed: ceil(out / LANES) blocks of [in][LANES] (in rounded up to even in pairs),
 * zero-padded. */
size_t mm_packed_bytes(int wk, int pairs, int out, int in) {
    size_t inp = pairs ? (size_t)(in + 1) / 2 * 2 : (size_t)in;
    return (size_t)((out + LANES - 1) / LANES) * inp * LANES * SIZE[wk];
}

/* packed[blk][i][l] = w[blk * LANES + l][i], or in pairs packed[blk][i / 2][l][i % 2] */
void mm_pack(const void *w, int wk, int pairs, int out, int in, void *packed, int threads) {
    int blocks = (out + LANES - 1) / LANES, s = SIZE[wk], inp = pairs ? (in + 1) / 2 * 2 : in;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
        char *dst = (char *)packed + (size_t)blk * inp * LANES * s;
        for (int i = 0; i < inp; i++)
            for (int l = 0; l < LANES; l++) {
                int o = blk * LANES + l;
                size_t at = pairs ? ((size_t)(i / 2) * LANES + l) * 2 + i % 2
                                  : (size_t)i * LANES + l;
                if (o < out && i < in) memcpy(dst + at * s, (const char *)w + ((size_t)o * in + i) * s, s);
                else memset(dst + at * s, 0, s);
            }
    }
}

/* NB blocks of LANES outputs, RB rows of x: acc[b][r] += W[blk b][i][:] * x[r][i] */
#define KERNEL(NAME, LOAD, S, NB, RB) \
static void NAME##_##NB##_##RB(const void *xv, int in, const char *wp, vf *out) { \
    const float *x = xv; \
    vf acc[NB][RB]; \
    for (int b = 0; b < NB; b++) for (int r = 0; r < RB; r++) acc[b][r] = (vf){0}; \
    const size_t bstride = (size_t)in * LANES * S; \
    for (int i = 0; i < in; i++) { \
        for (int b = 0; b < NB; b++) { \
            vf w = LOAD(wp + b * bstride + (size_t)i * LANES * S); \
            for (int r = 0; r < RB; r++) acc[b][r] += w * x[(size_t)r * in + i]; \
        } \
    } \
    for (int b = 0; b < NB; b++) for (int r = 0; r < RB; r++) out[b * RB + r] = acc[b][r]; \
}
/* The same on pairs: x is bfloat16 [RB][in] with in even, read as 32-bit pairs */
#define PKERNEL(NAME, LOAD, S, NB, RB) \
static void NAME##_##NB##_##RB(const void *xv, int in, const char *wp, vf *out) { \
    const uint32_t *x = xv; \
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
#else
#define NB_1 4
#define NB_2 2
#define NB_3 2
#define NB_4 2
#define NB_5 1
#define NB_6 1
#define NB_7 1
#define NB_8 1
#define GROUP 4
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

typedef void (*kfn)(const void *, int, const char *, vf *);

/* y[r][o] = sum_i x[r][i] * w[o][i] (* scale[o]) (+ bias[o]); x and y (and bias) of kind xk
 * (F32 or BF16), W of kind wk packed by mm_pack (in pairs or not), scale (I8 only) of kind sk.
 * Returns 0; 1 on bad arguments, 2 when out of memory. */
int mm_gemv(const void *x, int xk, const void *packed, int wk, int pairs, const void *scale,
            int sk, const void *bias, void *y, int rows, int in, int out, int threads) {
    if (rows < 1 || in < 1 || out < 1 || (xk != F32 && xk != BF16) || wk < F32 || wk > I8 ||
        (wk == I8 && !scale) || (pairs && (!PAIRS || xk != BF16 || wk == F32)))
        return 1;
    kfn many[9], one[9];
#define SET(N) \
    many[1] = N##_NB_1_1; many[2] = N##_NB_2_2; many[3] = N##_NB_3_3; many[4] = N##_NB_4_4; \
    many[5] = N##_NB_5_5; many[6] = N##_NB_6_6; many[7] = N##_NB_7_7; many[8] = N##_NB_8_8; \
    one[1] = N##_1_1; one[2] = N##_1_2; one[3] = N##_1_3; one[4] = N##_1_4; \
    one[5] = N##_1_5; one[6] = N##_1_6; one[7] = N##_1_7; one[8] = N##_1_8;
    /* x as the kernels read it: float32, or bfloat16 padded to even inputs for pairs */
    const int inp = pairs ? (in + 1) / 2 * 2 : in;
    void *xs = malloc((size_t)rows * inp * (pairs ? 2 : 4));
    if (!xs) return 2;
    if (pairs) {
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
        for (size_t j = 0; j < (size_t)rows * in; j++) xf[j] = get(x, xk, j);
        if (wk == F32) { SET(kf) } else if (wk == BF16) { SET(kh) } else { SET(kb) }
    }
    const size_t xrow = (size_t)inp * (pairs ? 2 : 4);
    const int blocks = (out + LANES - 1) / LANES, s = SIZE[wk];
    const size_t bstride = (size_t)inp * LANES * s;
    const int group = GROUP;
    const int tasks = (blocks + group - 1) / group;
    if ((size_t)blocks * bstride < (384u << 10)) threads = 1;  /* waking a thread costs more */
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < tasks; t++) {
        vf acc[16];
        int b0 = t * group, b1 = b0 + group < blocks ? b0 + group : blocks;
        for (int r0 = 0; r0 < rows; r0 += 8) {
            int rb = rows - r0 < 8 ? rows - r0 : 8, nb = NBLOCKS[rb];
            for (int b = b0; b < b1;) {
                int n = b + nb <= b1 ? nb : 1;
                (n == 1 ? one : many)[rb]((const char *)xs + r0 * xrow, inp,
                                          (const char *)packed + b * bstride, acc);
                for (int k = 0; k < n; k++) for (int r = 0; r < rb; r++)
                    for (int l = 0; l < LANES; l++) {
                        int o = (b + k) * LANES + l;
                        if (o >= out) break;
                        float v = acc[k * rb + r][l];
                        if (wk == I8) v *= get(scale, sk, o);
                        if (bias) v += get(bias, xk, o);
                        size_t at = (size_t)(r0 + r) * out + o;
                        if (xk == F32) ((float *)y)[at] = v; else ((uint16_t *)y)[at] = f32_bf16(v);
                    }
                b += n;
            }
        }
    }
    free(xs);
    return 0;
}
