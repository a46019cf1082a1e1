/* What gemv.c and decode.c share: the vector types of this CPU (LANES floats), the number
 * kinds, and the conversions of bfloat16 and int8 to float32 (scalar and vector). */
#ifndef MM_H
#define MM_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#define LANES 16
#else
#define LANES 8
#endif
typedef float vf __attribute__((vector_size(LANES * 4)));
typedef int32_t vi __attribute__((vector_size(LANES * 4)));
typedef uint32_t vu __attribute__((vector_size(LANES * 4)));
typedef uint16_t vh __attribute__((vector_size(LANES * 2)));
typedef int8_t vb __attribute__((vector_size(LANES)));

enum { F32 = 0, BF16 = 1, I8 = 2 };
static const int SIZE[3] = {4, 2, 1};

static inline float bf16_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t f32_bf16(float f) {  /* round to nearest even, as torch does */
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u); return (uint16_t)(u >> 16);
}
static inline float get(const void *p, int kind, size_t j) {
    return kind == F32 ? ((const float *)p)[j] : kind == BF16 ? bf16_f32(((const uint16_t *)p)[j])
                                                              : (float)((const int8_t *)p)[j];
}

static inline vf load_f32(const void *p) { vf v; memcpy(&v, p, sizeof v); return v; }
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__)
static inline vf load_bf16(const void *p) {
    __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return (vf)_mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}
static inline vf load_i8(const void *p) {
    return (vf)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
#elif defined(__AVX2__)
static inline vf load_bf16(const void *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return (vf)_mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}
static inline vf load_i8(const void *p) {
    return (vf)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
#else  /* any other CPU: the compiler's own vector code */
static inline vf load_bf16(const void *p) {
    vh h; memcpy(&h, p, sizeof h);
    vu u = __builtin_convertvector(h, vu) << 16;
    vf v; memcpy(&v, &u, sizeof v); return v;
}
static inline vf load_i8(const void *p) {
    vb b; memcpy(&b, p, sizeof b);
    return __builtin_convertvector(__builtin_convertvector(b, vi), vf);
}
#endif

/* v rounded to bfloat16 (to nearest even, NaN kept NaN, as f32_bf16): the bits in each lane's
 * low 16 */
static inline vu bf16_bits(vf v) {
    vu u; memcpy(&u, &v, sizeof u);
    vu nan = (vu)((u & 0x7fffffffu) > 0x7f800000u);
    vu r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (nan & ((u >> 16) | 0x40u)) | (~nan & r);
}

/* v rounded to bfloat16 and stored at p */
static inline void store_bf16(uint16_t *p, vf v) {
    vh h = __builtin_convertvector(bf16_bits(v), vh);
    memcpy(p, &h, sizeof h);
}

/* LANES values of kind F32 or BF16 at p[at] as floats */
static inline vf load_kind(const void *p, int kind, size_t at) {
    return kind == F32 ? load_f32((const float *)p + at) : load_bf16((const uint16_t *)p + at);
}

#endif
