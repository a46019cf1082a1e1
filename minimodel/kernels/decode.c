/* A whole decode step of Qwen3 in one call: the embedding, every layer, the final norm (and
 * for a greedy step, mm_decode_greedy at the end, the LM head and the argmax too).
 *
 * On a CPU a small model's decode step is short (a few ms), and the model written in torch
 * spends most of it outside its matrix products: a layer is about thirty small torch calls
 * (norms, RoPE, the KV writes, the page gathers, attention, SiLU, adds), each a few
 * microseconds of dispatch and a fresh output tensor. Here one call does all of them for every
 * layer, with the same products (mm_gemv on the layers' packed weights, gemv.c) and the
 * elementwise work in plain loops over buffers that live for the call.
 *
 * It computes what the engine's model computes (minimodel/engine/model.py), in the same order
 * and rounded to the model's dtype at the same points (R below): RMSNorm in float32 then times
 * its weight, q/k norms per head, RoPE in float32 with the rotate-half convention, each new K/V
 * written into its slot of the paged pool ([P, 2, S, Hkv, D], FlashInfer's NHD layout), softmax
 * attention in float32 over each request's pages, SiLU(gate) * up, the residual adds. Sums run
 * in another order than torch's, so hidden states equal the model's within float rounding.
 * Attention runs one task per (request, KV head), on threads when there is enough of it, and
 * asks for each K/V a few tokens ahead: after the products have streamed the weights through
 * the caches, the pages come from memory.
 */
#include "mm.h"
#include <math.h>
#include <time.h>

/* gemv.c */
int mm_gemv(const void *x, int xk, const void *packed, int wk, int layout, const void *scale,
            int sk, const void *bias, void *y, int rows, int in, int out, int threads);

typedef struct {  /* one product's weight, as mm_gemv takes it */
    const void *packed, *scale, *bias;
    int32_t wk, layout, sk, in, out;
} mm_weight;

typedef struct {
    const void *in_norm, *q_norm, *k_norm, *post_norm;  /* [C], [D], [D], [C] */
    mm_weight qkv, o, gate_up, down;
    void *pool;  /* this layer's K/V pages [P, 2, S, Hkv, D] */
} mm_layer;

typedef struct {
    int32_t layers, C, Hq, Hkv, D, I, S, xk, threads;
    int32_t vocab, pages, positions;  /* rows of embed, pages of each pool, rows of cos/sin */
    float eps, scale;  /* RMSNorm's eps; attention's softmax scale */
    const mm_layer *layer;
    const void *embed;  /* [V, C] */
    const float *cos, *sin;  /* RoPE tables [positions, D], float32 */
    const void *norm;  /* the final norm's weight [C] */
} mm_model;

/* A value rounded as a tensor of the model's kind holds it */
static inline float R(float v, int xk) { return xk == BF16 ? bf16_f32(f32_bf16(v)) : v; }
static inline void put(void *p, int kind, size_t j, float v) {
    if (kind == F32) ((float *)p)[j] = v; else ((uint16_t *)p)[j] = f32_bf16(v);
}
/* R and put for LANES values at once (the same rounding, lane by lane) */
static inline vf vround(vf v, int xk) {
    if (xk != BF16) return v;
    vu r = bf16_bits(v) << 16;
    memcpy(&v, &r, sizeof v);
    return v;
}
static inline void store_kind(void *p, int kind, size_t at, vf v) {
    if (kind == F32) memcpy((float *)p + at, &v, sizeof v); else store_bf16((uint16_t *)p + at, v);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* y[r] (kind xk) = x[r] @ W.T for B rows, x of kind xk; the seconds added to *spent */
static int product(const mm_model *m, const void *x, const mm_weight *w, void *y, int B,
                   double *spent) {
    double t0 = now();
    int code = mm_gemv(x, m->xk, w->packed, w->wk, w->layout, w->scale, w->sk, w->bias, y, B,
                       w->in, w->out, m->threads);
    *spent += now() - t0;
    return code;
}

static inline float hsum(vf v) {  /* the sum of a vector's lanes, as a tree */
#if defined(__AVX512F__)
    return _mm512_reduce_add_ps((__m512)v);
#elif defined(__AVX2__)
    __m128 h = _mm_add_ps(_mm256_castps256_ps128((__m256)v), _mm256_extractf128_ps((__m256)v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
#else
    float a[LANES];
    memcpy(a, &v, sizeof a);
    for (int w = LANES / 2; w; w /= 2) for (int l = 0; l < w; l++) a[l] += a[l + w];
    return a[0];
#endif
}

/* res[j] = R(v[j] + res[j]) for n values, v of kind vk (the residual add) */
static void residual(float *res, const void *v, int vk, int n, int xk) {
    int j = 0;
    for (; j + LANES <= n; j += LANES) {
        vf r = vround(load_kind(v, vk, j) + load_f32(res + j), xk);
        memcpy(res + j, &r, sizeof r);
    }
    for (; j < n; j++) res[j] = R(get(v, vk, j) + res[j], xk);
}

/* out[r] (kind xk) = RMSNorm(v[r]) * w over n values of float v (already of kind xk) */
static void rms_norm(const float *v, const void *w, int n, float eps, int xk, void *out,
                     size_t at) {
    if (n % LANES == 0) {  /* whole vectors */
        vf acc = (vf){0};
        for (int i = 0; i < n; i += LANES) { vf x = load_f32(v + i); acc += x * x; }
        float r = 1.0f / sqrtf(hsum(acc) / n + eps);
        for (int i = 0; i < n; i += LANES)
            store_kind(out, xk, at + i, load_kind(w, xk, i) * vround(load_f32(v + i) * r, xk));
        return;
    }
    float ss = 0;
    for (int i = 0; i < n; i++) ss += v[i] * v[i];
    float r = 1.0f / sqrtf(ss / n + eps);
    for (int i = 0; i < n; i++) put(out, xk, at + i, R(get(w, xk, i) * R(v[i] * r, xk), xk));
}

/* e^x for LANES floats: x = k ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^7
 * (relative error under 2e-7, below float32's half step), times 2^k through the exponent.
 * x is first clamped to [-87, 88], so 2^k stays normal (a NaN stays NaN); k = round(x / ln2)
 * by the float adder: x / ln2 + 1.5 * 2^23 holds k in its low mantissa bits, and less
 * 1.5 * 2^23 again it is k as a float. */
static inline vf vexp(vf x) {
#if defined(__AVX512F__)
    x = (vf)_mm512_max_ps(_mm512_set1_ps(-87.0f), _mm512_min_ps(_mm512_set1_ps(88.0f), (__m512)x));
#elif defined(__AVX2__)
    x = (vf)_mm256_max_ps(_mm256_set1_ps(-87.0f), _mm256_min_ps(_mm256_set1_ps(88.0f), (__m256)x));
#else
    const vf lo = (vf){0} - 87.0f, hi = (vf){0} + 88.0f;
    vi below = (vi)(x < lo), above = (vi)(x > hi);
    x = (vf)(((vi)x & ~(below | above)) | ((vi)lo & below) | ((vi)hi & above));
#endif
    const float magic = 12582912.0f;  /* 1.5 * 2^23 */
    vf t = x * 1.44269504088896341f + magic;
    vf kf = t - magic;
    vf r = x - kf * 0.693145751953125f - kf * 1.428606820309417e-06f;  /* ln2 in two parts */
    vf p = (vf){0} + 1.0f / 5040;
    p = p * r + 1.0f / 720; p = p * r + 1.0f / 120; p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6; p = p * r + 0.5f; p = p * r + 1.0f; p = p * r + 1.0f;
    vi bits = ((vi)t - 0x4B400000 + 127) << 23;  /* 2^k: k + 127 in the exponent */
    vf two_k;
    memcpy(&two_k, &bits, sizeof two_k);
    return p * two_k;
}

/* ask for the cache lines of n bytes at p ahead of their use: a request's K/V pages lie
 * anywhere in the pool, and after a step's products they come from memory */
static inline void fetch(const void *p, size_t n) {
    for (size_t b = 0; b < n; b += 64) __builtin_prefetch((const char *)p + b, 0, 3);
}
#define AHEAD 32  /* tokens ahead */

/* attention of one request's query heads that read KV head g, over its L cached tokens: for
 * each of those G = Hq / Hkv heads q (float [G][D]), softmax(q . k_t * scale) @ v_t, into out
 * (float [G][D]); scores: float [G][L] of scratch. Token by token, every head of the group at
 * once: a token's key (and value) for KV head g is one stretch of memory [D] */
static void attend(const mm_model *m, const void *pool, const int32_t *pages, int L, int g,
                   const float *q, float *scores, float *out) {
    const int S = m->S, D = m->D, Hkv = m->Hkv, xk = m->xk, G = m->Hq / Hkv;
    const size_t vec = (size_t)Hkv * D, page = 2 * (size_t)S * vec, head = (size_t)g * D;
    const size_t size = SIZE[xk], row = D * size;  /* bytes of one token's key (or value) */
    const int wide = D % LANES == 0;  /* whole vectors of the head dim */
    /* the token AHEAD of the one at hand: its page in the table and its place in that page,
       counted along (no division a token: S is any page size) */
    int ahead_page = 0, ahead_at = 0;
    for (int t = 0; t < L && t < AHEAD; t++) {  /* the first keys and values */
        const size_t at = pages[ahead_page] * page + (size_t)ahead_at * vec + head;
        fetch((const char *)pool + at * size, row);
        fetch((const char *)pool + (at + (size_t)S * vec) * size, row);
        if (++ahead_at == S) { ahead_at = 0; ahead_page++; }
    }
    for (int t0 = 0; t0 < L; t0 += S) {  /* page by page, token by token */
        const size_t k0 = pages[t0 / S] * page + head;
        const int n = L - t0 < S ? L - t0 : S;
        for (int u = 0; u < n; u++) {
            const size_t k = k0 + (size_t)u * vec;
            if (t0 + u + AHEAD < L) {  /* its key and value */
                const size_t at = pages[ahead_page] * page + (size_t)ahead_at * vec + head;
                fetch((const char *)pool + at * size, row);
                fetch((const char *)pool + (at + (size_t)S * vec) * size, row);
                if (++ahead_at == S) { ahead_at = 0; ahead_page++; }
            }
            for (int j = 0; j < G; j++) {
                const float *qj = q + (size_t)j * D;
                float s = 0;
                if (wide) {
                    vf acc = (vf){0};
                    for (int d = 0; d < D; d += LANES) acc += load_kind(pool, xk, k + d) * load_f32(qj + d);
                    s = hsum(acc);
                } else {
                    for (int d = 0; d < D; d++) s += qj[d] * get(pool, xk, k + d);
                }
                scores[(size_t)j * L + t0 + u] = s * m->scale;
            }
        }
    }
    for (int j = 0; j < G; j++) {  /* softmax of each head's scores */
        float *sc = scores + (size_t)j * L, top = -INFINITY, sum = 0;
        for (int t = 0; t < L; t++) if (sc[t] > top) top = sc[t];
        int t = 0;
        for (; t + LANES <= L; t += LANES) {
            vf e = vexp(load_f32(sc + t) - top);
            memcpy(sc + t, &e, sizeof e);
            sum += hsum(e);
        }
        for (; t < L; t++) { sc[t] = expf(sc[t] - top); sum += sc[t]; }
        for (t = 0; t < L; t++) sc[t] /= sum;
    }
    for (size_t j = 0; j < (size_t)G * D; j++) out[j] = 0;
    ahead_page = AHEAD / S, ahead_at = AHEAD % S;  /* the values, from the first again */
    for (int t0 = 0; t0 < L; t0 += S) {
        const size_t v0 = pages[t0 / S] * page + (size_t)S * vec + head;
        const int n = L - t0 < S ? L - t0 : S;
        for (int u = 0; u < n; u++) {
            const size_t v = v0 + (size_t)u * vec;
            if (t0 + u + AHEAD < L) {  /* fetched already, unless a long row's left */
                fetch((const char *)pool + (pages[ahead_page] * page + (size_t)S * vec + (size_t)ahead_at * vec + head) * size, row);
                if (++ahead_at == S) { ahead_at = 0; ahead_page++; }
            }
            for (int j = 0; j < G; j++) {
                const float p = scores[(size_t)j * L + t0 + u];
                float *oj = out + (size_t)j * D;
                if (wide) {
                    for (int d = 0; d < D; d += LANES) {
                        vf o = load_f32(oj + d) + p * load_kind(pool, xk, v + d);
                        memcpy(oj + d, &o, sizeof o);
                    }
                } else {
                    for (int d = 0; d < D; d++) oj[d] += p * get(pool, xk, v + d);
                }
            }
        }
    }
}

/* one request's new token after its qkv product (y, kind xk, [Hq + 2 Hkv][D]): q and k
 * normed per head then turned by RoPE at its position (cs, sn), q into float q [Hq][D], k and
 * v into the pool at kv_at (v as it came out of the product); head: float [D] of scratch */
static void qk_rope(const mm_model *m, const mm_layer *ly, const void *y, const float *cs,
                    const float *sn, size_t kv_at, float *q, float *head) {
    const int Hq = m->Hq, Hkv = m->Hkv, D = m->D, S = m->S, xk = m->xk, h = D / 2;
    const size_t vec = (size_t)Hkv * D;
    const int wide = h % LANES == 0;  /* whole vectors of each half of a head */
    for (int hh = 0; hh < Hq + Hkv; hh++) {
        const size_t at = (size_t)hh * D;
        const void *w = hh < Hq ? ly->q_norm : ly->k_norm;
        float *dst = hh < Hq ? q + at : NULL;  /* q, or k into the pool */
        const size_t k_at = kv_at + (size_t)(hh - Hq) * D;
        if (wide) {
            vf acc = (vf){0};
            for (int d = 0; d < D; d += LANES) { vf x = load_kind(y, xk, at + d); acc += x * x; }
            const float r = 1.0f / sqrtf(hsum(acc) / D + m->eps);
            for (int d = 0; d < D; d += LANES) {
                vf x = vround(load_kind(w, xk, d) * vround(load_kind(y, xk, at + d) * r, xk), xk);
                memcpy(head + d, &x, sizeof x);
            }
            for (int d = 0; d < h; d += LANES) {  /* rotate half: (a, b) -> (a c - b s, b c + a s) */
                vf a = load_f32(head + d), b = load_f32(head + h + d);
                vf lo = vround(a * load_f32(cs + d) + (-b) * load_f32(sn + d), xk);
                vf hi = vround(b * load_f32(cs + h + d) + a * load_f32(sn + h + d), xk);
                if (dst) { memcpy(dst + d, &lo, sizeof lo); memcpy(dst + h + d, &hi, sizeof hi); }
                else { store_kind(ly->pool, xk, k_at + d, lo); store_kind(ly->pool, xk, k_at + h + d, hi); }
            }
            continue;
        }
        for (int d = 0; d < D; d++) head[d] = get(y, xk, at + d);
        float ss = 0;
        for (int d = 0; d < D; d++) ss += head[d] * head[d];
        float r = 1.0f / sqrtf(ss / D + m->eps);
        for (int d = 0; d < D; d++) head[d] = R(get(w, xk, d) * R(head[d] * r, xk), xk);
        for (int d = 0; d < D; d++) {
            float turned = d < h ? -head[d + h] : head[d - h];
            float v = R(head[d] * cs[d] + turned * sn[d], xk);
            if (dst) dst[d] = v; else put(ly->pool, xk, k_at + d, v);
        }
    }
    const size_t v_from = (size_t)(Hq + Hkv) * D, v_at = kv_at + S * vec;
    int j = 0;  /* V as it came out of the product */
    for (; j + LANES <= Hkv * D; j += LANES) store_kind(ly->pool, xk, v_at + j, load_kind(y, xk, v_from + j));
    for (; j < Hkv * D; j++) put(ly->pool, xk, v_at + j, get(y, xk, v_from + j));
}

/* hidden[b] (kind xk, [B, C]) for B requests that each bring one new token ids[b] at
 * positions[b], written to slots[b] (page * S + offset); request b's pages are
 * kv_indices[kv_indptr[b]:kv_indptr[b + 1]] and it holds kv_lens[b] tokens with this one.
 * *product_s gets the seconds spent in the products. Returns 0; 1 on bad arguments (checked
 * before anything is written: a token, position, slot or page out of range, or kv_lens past a
 * request's pages), 2 when out of memory, or mm_gemv's code. */
int mm_decode(const mm_model *m, int B, const int64_t *ids, const int64_t *positions,
              const int64_t *slots, const int32_t *kv_indptr, const int32_t *kv_indices,
              const int32_t *kv_lens, void *hidden, double *product_s) {
    const int C = m->C, Hq = m->Hq, Hkv = m->Hkv, D = m->D, I = m->I, S = m->S, xk = m->xk;
    if (B < 1 || (xk != F32 && xk != BF16) || Hkv < 1 || Hq % Hkv || D % 2) return 1;
    const int QKV = (Hq + 2 * Hkv) * D, size = SIZE[xk];
    for (int b = 0; b < B; b++) {  /* everything it will read or write lies in its tensor */
        if (kv_lens[b] < 1 || kv_lens[b] > (kv_indptr[b + 1] - kv_indptr[b]) * S ||
            ids[b] < 0 || ids[b] >= m->vocab || positions[b] < 0 ||
            positions[b] >= m->positions || slots[b] < 0 || slots[b] >= (int64_t)m->pages * S)
            return 1;
        for (int p = kv_indptr[b]; p < kv_indptr[b + 1]; p++)
            if (kv_indices[p] < 0 || kv_indices[p] >= m->pages) return 1;
    }
    /* the widest row a product reads or writes: q/k/v, gate/up, the hidden size */
    const int wide = QKV > 2 * I ? (QKV > C ? QKV : C) : (2 * I > C ? 2 * I : C);
    float *x = malloc(sizeof(float) * B * C), *res = malloc(sizeof(float) * B * C);
    float *q = malloc(sizeof(float) * B * Hq * D), *heads = malloc(sizeof(float) * B * D);
    void *in = malloc((size_t)size * B * wide), *y = malloc((size_t)size * B * wide);
    int code = 0;
    double spent = 0;
    if (!x || !res || !q || !heads || !in || !y) { code = 2; goto done; }
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) x[b * C + c] = get(m->embed, xk, (size_t)ids[b] * C + c);
    const size_t vec = (size_t)Hkv * D, page = 2 * (size_t)S * vec;
    /* a batch's per-request work (RoPE, SiLU) on threads from 4 requests on; attention, one
       task per request and KV head, on threads when there is enough of it */
    const int rows_threads = B >= 4 ? m->threads : 1;
    long work = 0;
    for (int b = 0; b < B; b++) work += (long)kv_lens[b] * Hq * D;
    const int attn_threads = B * Hkv > 1 && work >= (1L << 15) ? m->threads : 1;
    const int n = B * C;
    for (int li = 0; li < m->layers; li++) {
        const mm_layer *ly = &m->layer[li];
        if (li) residual(res, x, F32, n, xk); else memcpy(res, x, sizeof(float) * n);
        for (int b = 0; b < B; b++) rms_norm(res + b * C, ly->in_norm, C, m->eps, xk, in, (size_t)b * C);
        if ((code = product(m, in, &ly->qkv, y, B, &spent))) goto done;
        #pragma omp parallel for num_threads(rows_threads) schedule(static)
        for (int b = 0; b < B; b++) {  /* q/k norm, RoPE, the new K/V into the pool */
            const int64_t slot = slots[b];
            qk_rope(m, ly, (const char *)y + (size_t)b * QKV * size, m->cos + positions[b] * D,
                    m->sin + positions[b] * D, (size_t)(slot / S) * page + (size_t)(slot % S) * vec,
                    q + (size_t)b * Hq * D, heads + (size_t)b * D);
        }
        int failed = 0;
        #pragma omp parallel for num_threads(attn_threads) schedule(dynamic)
        for (int task = 0; task < B * Hkv; task++) {
            const int b = task / Hkv, g = task % Hkv, G = Hq / Hkv, L = kv_lens[b];
            float *sc = malloc(sizeof(float) * ((size_t)G * L + (size_t)G * D));
            if (!sc) { failed = 1; continue; }
            float *o = sc + (size_t)G * L;
            const size_t at = ((size_t)b * Hq + (size_t)g * G) * D;
            attend(m, ly->pool, kv_indices + kv_indptr[b], L, g, q + at, sc, o);
            int j = 0;
            for (; j + LANES <= G * D; j += LANES) store_kind(in, xk, at + j, load_f32(o + j));
            for (; j < G * D; j++) put(in, xk, at + j, o[j]);
            free(sc);
        }
        if (failed) { code = 2; goto done; }
        if ((code = product(m, in, &ly->o, y, B, &spent))) goto done;
        residual(res, y, xk, n, xk);
        for (int b = 0; b < B; b++) rms_norm(res + b * C, ly->post_norm, C, m->eps, xk, in, (size_t)b * C);
        if ((code = product(m, in, &ly->gate_up, y, B, &spent))) goto done;
        #pragma omp parallel for num_threads(rows_threads) schedule(static)
        for (int b = 0; b < B; b++) {  /* SiLU(gate) * up */
            const size_t g0 = (size_t)b * 2 * I, u0 = g0 + I;
            int i = 0;
            for (; i + LANES <= I; i += LANES) {
                vf g = load_kind(y, xk, g0 + i), u = load_kind(y, xk, u0 + i);
                store_kind(in, xk, (size_t)b * I + i, vround(g / (1.0f + vexp(-g)), xk) * u);
            }
            for (; i < I; i++) {
                float g = get(y, xk, g0 + i), u = get(y, xk, u0 + i);
                put(in, xk, (size_t)b * I + i, R(R(g / (1.0f + expf(-g)), xk) * u, xk));
            }
        }
        if ((code = product(m, in, &ly->down, y, B, &spent))) goto done;
        int j = 0;
        for (; j + LANES <= n; j += LANES) { vf v = load_kind(y, xk, j); memcpy(x + j, &v, sizeof v); }
        for (; j < n; j++) x[j] = get(y, xk, j);
    }
    if (m->layers) residual(res, x, F32, n, xk); else memcpy(res, x, sizeof(float) * n);
    for (int b = 0; b < B; b++) rms_norm(res + b * C, m->norm, C, m->eps, xk, hidden, (size_t)b * C);
done:
    free(x); free(res); free(q); free(heads); free(in); free(y);
    *product_s = spent;
    return code;
}

static inline int any(vi m) {  /* is any lane of m set? */
#if defined(__AVX512F__)
    return _mm512_test_epi32_mask((__m512i)m, (__m512i)m) != 0;
#elif defined(__AVX2__)
    return !_mm256_testz_si256((__m256i)m, (__m256i)m);
#else
    int32_t a[LANES]; memcpy(a, &m, sizeof a); int o = 0; for (int l = 0; l < LANES; l++) o |= a[l]; return o != 0;
#endif
}

/* The greedy choice of each row of logits [rows, V] (kind F32 or BF16): tokens[r], the index
 * of its first largest logit (a NaN counts as the largest, as in torch.argmax), and
 * logprobs[r], that token's log-probability: log_softmax(row)[token] = -log(sum_i e^(x_i -
 * max)), NaN where a row holds a NaN or an infinity as its largest. With logprobs NULL,
 * nothing is scored (no e^x pass: a greedy request that asked for no log-probabilities) and
 * tokens[r] is -1 where the row's largest is not finite (a NaN, +inf, or a row of -inf): the
 * caller decides those rows.
 *
 * One pass over the row, in parts (one per thread on a long row), each part block by block:
 * a block's largest values lane by lane (and where each first stood), then, the block still in
 * L1, its e^(x - top) summed against the part's running largest `top`; when a block raises
 * `top`, the sum so far is scaled down by e^(old top - new top) (an online softmax). The parts
 * then meet: the largest of their tops, and their sums scaled to it. */
#define BLOCK 64  /* vectors a block: a few KiB */
typedef struct { float top, sum; int64_t token; int nan; } scan;

static scan scan_part(const void *logits, int kind, size_t row, int v0, int v1, int score) {
    vf vmax = (vf){0} - INFINITY;
    vi where = (vi){0}, lane, nans = (vi){0};
    for (int l = 0; l < LANES; l++) lane[l] = l;
    scan out = {-INFINITY, 0.0f, -1, 0};
    for (int b0 = v0; b0 < v1; b0 += BLOCK) {
        const int b1 = b0 + BLOCK < v1 ? b0 + BLOCK : v1;
        for (int v = b0; v < b1; v++) {  /* the largest so far, lane by lane */
            const int i = v * LANES;
            vf x = load_kind(logits, kind, row + i);
            vi gt = (vi)(x > vmax);  /* a later equal one does not move it */
            nans |= (vi)(x != x);
            vmax = (vf)(((vi)x & gt) | ((vi)vmax & ~gt));
            where = ((lane + i) & gt) | (where & ~gt);
        }
        float top = out.top;
        for (int l = 0; l < LANES; l++) if (vmax[l] > top) top = vmax[l];
        if (top > out.top) { out.sum *= expf(out.top - top); out.top = top; }
        if (!score || !(top > -INFINITY) || isinf(top)) continue;  /* scored below, if at all */
        vf s0 = (vf){0}, s1 = s0;  /* two sums, each half as long */
        int v = b0;
        for (; v + 2 <= b1; v += 2) {
            s0 += vexp(load_kind(logits, kind, row + (size_t)v * LANES) - top);
            s1 += vexp(load_kind(logits, kind, row + (size_t)(v + 1) * LANES) - top);
        }
        if (v < b1) s0 += vexp(load_kind(logits, kind, row + (size_t)v * LANES) - top);
        out.sum += hsum(s0 + s1);
    }
    if (out.top > -INFINITY)  /* the first place the largest stands */
        for (int l = 0; l < LANES; l++)
            if (vmax[l] == out.top && (out.token < 0 || where[l] < out.token)) out.token = where[l];
    out.nan = any(nans);
    return out;
}

static void greedy_row(const void *logits, int kind, int r, int V, int64_t *tokens,
                       float *logprobs, int threads) {
    const int score = logprobs != NULL;
    const size_t row = (size_t)r * V;
    const int vectors = V / LANES, parts = V >= (1 << 15) && threads > 1
        ? (threads < 64 ? threads : 64) : 1;
    scan part[64];
    #pragma omp parallel for num_threads(parts) schedule(static)
    for (int t = 0; t < parts; t++)
        part[t] = scan_part(logits, kind, row, (int)((long)vectors * t / parts),
                            (int)((long)vectors * (t + 1) / parts), score);
    float top = -INFINITY, sum = 0;
    int64_t token = -1;
    int nan = 0;
    for (int t = 0; t < parts; t++) {  /* in order: the first of equal tops wins */
        nan |= part[t].nan;
        if (part[t].token >= 0 && part[t].top > top) { top = part[t].top; token = part[t].token; }
    }
    for (int t = 0; t < parts; t++)
        if (part[t].token >= 0 && top < INFINITY) sum += part[t].sum * expf(part[t].top - top);
    for (int j = vectors * LANES; j < V; j++) {  /* the tail past the last whole vector */
        float x = get(logits, kind, row + j);
        if (x != x) { nan = 1; continue; }
        if (x > top) {
            if (top > -INFINITY && x < INFINITY) sum *= expf(top - x);
            top = x; token = j;
        }
        if (top > -INFINITY && top < INFINITY) sum += expf(x - top);
    }
    if (!score) { tokens[r] = nan || isinf(top) ? -1 : token; return; }
    if (nan || token < 0) {  /* a NaN counts as the largest (torch.argmax): the first NaN;
                                an all -inf row: its first value */
        for (int j = 0; j < V; j++) {
            float x = get(logits, kind, row + j);
            if (nan ? x != x : x == top) { token = j; break; }
        }
    }
    tokens[r] = token;
    logprobs[r] = nan || isinf(top) ? NAN : -logf(sum);
}

void mm_greedy(const void *logits, int kind, int rows, int V, int64_t *tokens, float *logprobs,
               int threads) {
    if (rows < 4) {  /* a few rows: one after another, the threads sharing each row's sums */
        for (int r = 0; r < rows; r++) greedy_row(logits, kind, r, V, tokens, logprobs, threads);
        return;
    }
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < rows; r++) greedy_row(logits, kind, r, V, tokens, logprobs, 1);
}

/* A decode step to its greedy tokens in one call: mm_decode into hidden [B, C], then the LM
 * head's product (head: a weight as the layers', [vocab, C]) into logits [B, vocab] of the
 * model's kind (the caller's buffer: kept from step to step, its pages stay mapped), then
 * mm_greedy's pass over them: tokens[b] and logprobs[b] (or with logprobs NULL, tokens[b]
 * only, -1 where mm_greedy decides nothing). The head's seconds are added to
 * *product_s. Returns mm_decode's codes (1 too for a head that does not take C inputs). */
int mm_decode_greedy(const mm_model *m, const mm_weight *head, int B, const int64_t *ids,
                     const int64_t *positions, const int64_t *slots, const int32_t *kv_indptr,
                     const int32_t *kv_indices, const int32_t *kv_lens, void *hidden,
                     void *logits, int64_t *tokens, float *logprobs, double *product_s) {
    *product_s = 0;
    if (B < 1 || head->in != m->C || head->out < 1) return 1;
    int code = mm_decode(m, B, ids, positions, slots, kv_indptr, kv_indices, kv_lens, hidden,
                         product_s);
    if (code) return code;
    double spent = 0;
    if (!(code = product(m, hidden, head, logits, B, &spent)))
        mm_greedy(logits, m->xk, B, head->out, tokens, logprobs, m->threads);
    *product_s += spent;
    return code;
}
