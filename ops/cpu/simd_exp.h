// ops/cpu/simd_exp.h — private to ops/cpu: the AVX-512 exp shared by the
// elementwise kernels and attention. Cephes' expf: n = round(x/ln2),
// r = x - n*ln2 in two parts, a degree-6 polynomial for e^r, times 2^n;
// about 1 ulp from expf; -inf gives 0 and NaN stays NaN. Include after
// <immintrin.h> with RG_T512 defined.
#ifndef RG_OPS_CPU_SIMD_EXP_H
#define RG_OPS_CPU_SIMD_EXP_H

RG_T512 static inline __m512 exp512(__m512 x) {
  // max/min return their second operand when either is NaN: x goes second
  // so NaN survives the clamp. Below -104 the result is 0 even as a subnormal.
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  // scalef handles overflow to inf and underflow to subnormals and 0.
  return _mm512_scalef_ps(p, n);
}

#endif  // RG_OPS_CPU_SIMD_EXP_H
