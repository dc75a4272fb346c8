// Attention whose result for a query is a fixed function of that query and of the keys and
// values it sees, taken in position order: bit-identical whatever the tree it is verified in,
// the rows sharing the pass, their padding and the query count (core/model/canonical.py).
//
// Why a kernel of our own: a float sum's result depends on its order, and every library
// attention (SDPA, a matmul pair) picks its reduction order from the shapes of the call (the
// row count, the padded key length, where the tree's masked keys sit among the visible ones).
// Here each (row, key head, query) unit walks its visible keys in position order, one key at a
// time, with arithmetic written out in source order: the scores, the exponentials, the softmax
// sum and the weighted values never depend on anything but the unit's own inputs. Built with
// -ffp-contract=off (no fused multiply-add in one loop copy and not in another) and without
// -ffast-math (no reassociation), a vectorised loop computes exactly what its scalar remainder
// would, so the compiler's choices cannot differ between calls either.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <cstring>
#include <type_traits>
#include <vector>

namespace {

constexpr int kLanes = 16;

inline float to_float(float x) { return x; }
inline float to_float(c10::BFloat16 x) { return static_cast<float>(x); }

// exp(x) for x <= 0 (scores less their maximum), Cephes' single-precision polynomial written in
// plain arithmetic: the same operations for every element, vectorised or not (a libm call may
// be replaced by a vector variant in one loop copy only).
inline float exp_nonpositive(float x) {
  if (x < -87.0f) return 0.0f;
  const float n = static_cast<float>(static_cast<int>(x * 1.44269504088896341f - 0.5f));
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

constexpr int64_t kTile = 16;   // keys scored together (one vector of floats)
constexpr int64_t kChunk = 8;   // queries of one row sharing a unit (their keys converted once)

struct Shapes {
  int64_t rows, heads, kv_heads, queries, dim, path_width;
};

// The canonical arithmetic, per (query head, visible key list in position order):
//   score_j = fma chain over d = 0..dim-1 of q_d * k_jd, times scale (in order of d);
//   p_j = exp(score_j - max); sum = lanes j % 16 summed in j order, folded 8, 4, 2, 1;
//   out_d = (accumulators j % 4 in j order, folded (0+2)+(1+3)) / sum.
// Whichever way a loop below is vectorised, each element sees exactly these operations.
// bf16 to float: the upper half of the float's bits (exact)
inline float to_float_bits(uint16_t x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <typename T>
inline void convert(const T* src, float* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else {
    const uint16_t* raw = reinterpret_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = to_float_bits(raw[i]);
  }
}

// Buffers of one thread, reused from unit to unit.
struct Work {
  std::vector<float> qt;      // [query heads of the unit, dim]
  std::vector<float> kf, vf;  // [keys of the unit, dim]
  std::vector<float> score;   // [keys of the unit, query heads of the unit]
  std::vector<float> p, acc;  // one query's weights [heads, visible], accumulators [heads, dim]
  std::vector<int64_t> keyset, local;
};

// The lanes of a sum folded in a fixed tree: lane l += lane l + 8, then + 4, + 2, + 1.
inline float fold(float* lane) {
  for (int v = kLanes / 2; v >= 1; v /= 2)
    for (int l = 0; l < v; ++l) lane[l] += lane[l + v];
  return lane[0];
}

#if defined(__AVX512F__)
// The same fold on a vector (IEEE addition commutes exactly: the operand order is free).
inline float fold(__m512 acc) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(acc),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
#endif

// q . k, summed lane by lane (element d into lane d % 16, an fma chain over d per lane) and the
// lanes folded: the same operations for every key of every call, vectorised or not.
inline float dot(const float* __restrict q, const float* __restrict k, int64_t dim) {
#if defined(__AVX512F__)
  if (dim % kLanes == 0) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t d0 = 0; d0 < dim; d0 += kLanes)
      acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + d0), _mm512_loadu_ps(k + d0), acc);
    return fold(acc);
  }
#endif
  float lane[kLanes] = {0.0f};
  for (int64_t d0 = 0; d0 < dim; d0 += kLanes)
    for (int l = 0; l < kLanes && d0 + l < dim; ++l)
      lane[l] = __builtin_fmaf(q[d0 + l], k[d0 + l], lane[l]);
  return fold(lane);
}

// Σ p[0..n) lane by lane (element j into lane j % 16, in j order), folded.
inline float lane_sum(const float* __restrict p, int64_t n) {
  int64_t j0 = 0;
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  for (; j0 + kLanes <= n; j0 += kLanes) acc = _mm512_add_ps(acc, _mm512_loadu_ps(p + j0));
  // the tail's missing lanes add +0: what the scalar loop's not adding leaves (p >= 0)
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - j0)) - 1u);
  return fold(_mm512_add_ps(acc, _mm512_maskz_loadu_ps(tail, p + j0)));
#else
  float lane[kLanes] = {0.0f};
  for (; j0 < n; ++j0) lane[j0 % kLanes] += p[j0];
  return fold(lane);
#endif
}

// Scores of every query head of the unit over every key of the unit ([key, query head]).
inline void scores(Work& w, int64_t n, int64_t heads, int64_t dim, float scale) {
  w.score.resize(static_cast<size_t>(n * heads));
  for (int64_t u = 0; u < n; ++u) {
    const float* k = w.kf.data() + u * dim;
    for (int64_t h = 0; h < heads; ++h)
      w.score[u * heads + h] = dot(w.qt.data() + h * dim, k, dim) * scale;
  }
}

#if defined(__AVX512F__)
// exp_nonpositive on 16 lanes: the same operations in the same order (no fma: two roundings
// where the scalar form has two).
inline __m512 exp_nonpositive(__m512 x) {
  const __m512 n = _mm512_cvtepi32_ps(_mm512_cvttps_epi32(
      _mm512_sub_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _mm512_set1_ps(0.5f))));
  __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693359375f)));
  r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(-2.12194440e-4f)));
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r),
                                 _mm512_set1_ps(1.0f));
  const __m512i bits = _mm512_slli_epi32(
      _mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
  const __m512 out = _mm512_mul_ps(y, _mm512_castsi512_ps(bits));
  const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(under, out, _mm512_setzero_ps());
}
#endif

// p[j] = exp(p[j] - top) for j < n
inline void exponentiate(float* __restrict p, int64_t n, float top) {
  int64_t j = 0;
#if defined(__AVX512F__)
  const __m512 t = _mm512_set1_ps(top);
  for (; j + kLanes <= n; j += kLanes)
    _mm512_storeu_ps(p + j, exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(p + j), t)));
#endif
  for (; j < n; ++j) p[j] = exp_nonpositive(p[j] - top);
}

// The outputs of one query's `group` heads over its visible keys w.local (positions in the
// unit's key set, in position order): the softmax weights, their lane sum, and the weighted
// values as an fma chain over the keys in order, per element (the heads side by side: they
// see the same keys).
inline void combine(Work& w, int64_t first_qh, int64_t stride_qh, int64_t group, int64_t heads,
                    int64_t dim, float* out) {
  const int64_t n = static_cast<int64_t>(w.local.size());
  w.p.resize(static_cast<size_t>(group * n));
  std::vector<float> total(static_cast<size_t>(group));
  for (int64_t h = 0; h < group; ++h) {
    float* __restrict p = w.p.data() + h * n;
    const int64_t qh = first_qh + h * stride_qh;
    for (int64_t j = 0; j < n; ++j) p[j] = w.score[w.local[j] * heads + qh];
    float top = p[0];
    for (int64_t j = 1; j < n; ++j) top = p[j] > top ? p[j] : top;
    exponentiate(p, n, top);
    total[h] = lane_sum(p, n);
  }
  w.acc.assign(static_cast<size_t>(group * dim), 0.0f);
  float* __restrict acc = w.acc.data();
  for (int64_t j = 0; j < n; ++j) {
    const float* __restrict v = w.vf.data() + w.local[j] * dim;
    for (int64_t h = 0; h < group; ++h) {
      const float pj = w.p[h * n + j];
      float* __restrict a = acc + h * dim;
      for (int64_t d = 0; d < dim; ++d) a[d] = __builtin_fmaf(pj, v[d], a[d]);
    }
  }
  for (int64_t h = 0; h < group; ++h)
    for (int64_t d = 0; d < dim; ++d) out[h * dim + d] = acc[h * dim + d] / total[h];
}

template <typename T>
void run(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
         const at::Tensor& rows, const at::Tensor& lo, const at::Tensor& hi,
         const at::Tensor& path, const at::Tensor& path_len, double scale, at::Tensor& out) {
  const Shapes s{q.size(0), q.size(1), keys.size(1), q.size(2), q.size(3), path.size(2)};
  const int64_t ks[4] = {keys.stride(0), keys.stride(1), keys.stride(2), keys.stride(3)};
  const int64_t vs[4] = {values.stride(0), values.stride(1), values.stride(2), values.stride(3)};
  const T* qp = q.const_data_ptr<T>();
  T* op = out.mutable_data_ptr<T>();
  const int32_t* rowp = rows.const_data_ptr<int32_t>();
  const int32_t* lop = lo.const_data_ptr<int32_t>();
  const int32_t* hip = hi.const_data_ptr<int32_t>();
  const int32_t* pp = path.const_data_ptr<int32_t>();
  const int32_t* plp = path_len.const_data_ptr<int32_t>();
  const int64_t chunks = (s.queries + kChunk - 1) / kChunk;
  const int64_t units = s.rows * s.kv_heads * chunks, group = s.heads / s.kv_heads;
  // a unit (row, key head, chunk of queries) is computed whole by one thread, and a query's
  // arithmetic does not depend on the unit it shares: the split changes nothing
  const T* kp = keys.const_data_ptr<T>();
  const T* vp = values.const_data_ptr<T>();
  at::parallel_for(0, units, 1, [&](int64_t begin, int64_t end) {
    Work w;
    std::vector<float> of(static_cast<size_t>(group * s.dim));
    for (int64_t u = begin; u < end; ++u) {
      const int64_t c = u % chunks, g = (u / chunks) % s.kv_heads, b = u / (chunks * s.kv_heads);
      const int64_t t0 = c * kChunk, t_end = std::min(s.queries, t0 + kChunk);
      // padding queries (nothing visible: a row's last ones, where the pass pads it to its
      // widest neighbour) are zeros, not queries of the unit: scoring them would cost a
      // plain row beside a 14-node tree 8x its own work
      int64_t t1 = t_end;
      while (t1 > t0 && hip[b * s.queries + t1 - 1] <= lop[b * s.queries + t1 - 1] &&
             plp[b * s.queries + t1 - 1] == 0)
        --t1;
      for (int64_t t = t1; t < t_end; ++t)
        for (int64_t h = 0; h < group; ++h) {
          T* dst = op + ((b * s.heads + g * group + h) * s.queries + t) * s.dim;
          std::fill(dst, dst + s.dim, T(0.0f));
        }
      const int64_t tn = t1 - t0;
      if (tn == 0) continue;
      // the unit's keys: the union of its queries' committed ranges, then of their paths
      std::vector<int64_t>& keyset = w.keyset;
      keyset.clear();
      int64_t first = -1, last = -1;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t bt = b * s.queries + t;
        if (hip[bt] <= lop[bt]) continue;
        first = first < 0 ? lop[bt] : std::min<int64_t>(first, lop[bt]);
        last = std::max<int64_t>(last, hip[bt]);
      }
      for (int64_t j = first; first >= 0 && j < last; ++j) keyset.push_back(j);
      const int64_t ranged = static_cast<int64_t>(keyset.size());
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t bt = b * s.queries + t;
        for (int64_t i = 0; i < plp[bt]; ++i) keyset.push_back(pp[bt * s.path_width + i]);
      }
      std::sort(keyset.begin() + ranged, keyset.end());
      keyset.erase(std::unique(keyset.begin() + ranged, keyset.end()), keyset.end());
      const int64_t n = static_cast<int64_t>(keyset.size()), qh_n = group * tn;
      w.kf.resize(static_cast<size_t>(n * s.dim));
      w.vf.resize(static_cast<size_t>(n * s.dim));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t r = rowp[b];
        convert(kp + r * ks[0] + g * ks[1] + keyset[i] * ks[2], w.kf.data() + i * s.dim, s.dim);
        convert(vp + r * vs[0] + g * vs[1] + keyset[i] * vs[2], w.vf.data() + i * s.dim, s.dim);
      }
      w.qt.resize(static_cast<size_t>(s.dim * qh_n));
      for (int64_t h = 0; h < group; ++h)
        for (int64_t t = t0; t < t1; ++t) {
          convert(qp + ((b * s.heads + g * group + h) * s.queries + t) * s.dim,
                  w.qt.data() + (h * tn + (t - t0)) * s.dim, s.dim);
        }
      if (n > 0) scores(w, n, qh_n, s.dim, static_cast<float>(scale));
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t bt = b * s.queries + t;
        w.local.clear();
        for (int64_t j = lop[bt]; j < hip[bt]; ++j) w.local.push_back(j - first);
        for (int64_t i = 0; i < plp[bt]; ++i) {
          const int64_t key = pp[bt * s.path_width + i];
          w.local.push_back(std::lower_bound(keyset.begin() + ranged, keyset.end(), key) -
                            keyset.begin());
        }
        if (w.local.empty()) {  // a padding query: nothing to see, zeros (nothing reads them)
          std::fill(of.begin(), of.end(), 0.0f);
        } else {
          combine(w, t - t0, tn, group, qh_n, s.dim, of.data());
        }
        for (int64_t h = 0; h < group; ++h) {
          T* dst = op + ((b * s.heads + g * group + h) * s.queries + t) * s.dim;
          for (int64_t d = 0; d < s.dim; ++d) dst[d] = T(of[h * s.dim + d]);
        }
      }
    }
  });
}

// q [B, heads, T, hd]; keys, values [slots, kv_heads, S, hd], row b of the pass at slot
// rows[b]; lo, hi, path_len [B, T] and path [B, T, P] (int32): core/model/canonical.py.
at::Tensor canonical_attend(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                            const at::Tensor& rows, const at::Tensor& lo, const at::Tensor& hi,
                            const at::Tensor& path, const at::Tensor& path_len, double scale) {
  TORCH_CHECK(q.dim() == 4 && keys.dim() == 4 && values.dim() == 4, "q, keys, values: 4-D");
  TORCH_CHECK(q.is_contiguous(), "q must be contiguous");
  TORCH_CHECK(keys.stride(3) == 1 && values.stride(3) == 1, "keys and values: rows contiguous");
  TORCH_CHECK(keys.scalar_type() == q.scalar_type() && values.scalar_type() == q.scalar_type(),
              "q, keys and values share a dtype");
  TORCH_CHECK(q.size(1) % keys.size(1) == 0, "query heads a multiple of key heads");
  TORCH_CHECK(rows.scalar_type() == at::kInt && rows.is_contiguous() && rows.numel() == q.size(0),
              "rows: int32 [B]");
  TORCH_CHECK(lo.scalar_type() == at::kInt && hi.scalar_type() == at::kInt &&
                  path.scalar_type() == at::kInt && path_len.scalar_type() == at::kInt,
              "lo, hi, path, path_len: int32");
  TORCH_CHECK(lo.is_contiguous() && hi.is_contiguous() && path.is_contiguous() &&
                  path_len.is_contiguous(), "lo, hi, path, path_len must be contiguous");
  at::Tensor out = at::empty_like(q);
  if (q.scalar_type() == at::kBFloat16) {
    run<c10::BFloat16>(q, keys, values, rows, lo, hi, path, path_len, scale, out);
  } else {
    TORCH_CHECK(q.scalar_type() == at::kFloat, "bfloat16 or float32");
    run<float>(q, keys, values, rows, lo, hi, path, path_len, scale, out);
  }
  return out;
}

}  // namespace

TORCH_LIBRARY(hedgespec, m) {
  m.def("canonical_attend(Tensor q, Tensor keys, Tensor values, Tensor rows, Tensor lo, Tensor hi, "
        "Tensor path, Tensor path_len, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(hedgespec, CPU, m) { m.impl("canonical_attend", canonical_attend); }
