#ifndef GECD_KERNELS_GEMM_H_
#define GECD_KERNELS_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda_util.h"

// Linear layers through cuBLASLt: y[rows, out] = x[rows, in] · W[out, in]ᵀ, every matrix
// row-major. In cuBLASLt's column-major terms W is A with op T (lda = in) and x is B with op N
// (ldb = in), D = yᵀ [out, rows] (ldd = out): the "TN" layout FP8 requires.
//
//   - Bf16: bf16 × bf16, f32 accumulate, bf16 or f32 out.
//   - Fp8 (per-channel): e4m3 × e4m3, f32 accumulate,
//       y[t, o] = acc[t, o] · x_scale[t] · w_scale[o]  (common/numerics.h),
//     with CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F on A (w_scale, M = out elements) and B
//     (x_scale, N = rows elements). Where cuBLASLt lacks that mode (probed at Init; or, per
//     shape, refused at run time) the fallback runs the FP8 GEMM with unit scales into an f32
//     buffer and applies both scales in ScaleRowsCols (kernels/activation.h).
//   - Fp8 (per-tensor): one scale each for x and W (scalar mode), for comparison.
//
// FP8 needs `in` a multiple of 16 and `out` a multiple of 8 (16-byte aligned rows).
// Plans (descriptors + the heuristic's algorithm) are cached per shape, so a step calls the
// heuristic only for shapes it has not seen; cached plans make graph capture safe.
namespace gecd::kernels {

enum class GemmOut { kBf16, kF32 };
enum class Fp8Mode { kOuterVec, kUnitScaleFallback, kPerTensor };

// Owns the cuBLASLt handle, the workspace and the plan cache. Not thread-safe.
class GemmRunner {
 public:
  GemmRunner() = default;
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;
  ~GemmRunner();

  // Creates the handle and the workspace, and probes whether the outer-vector FP8 scale mode
  // has an algorithm (a GEMM of probe_out × probe_rows × probe_in).
  absl::Status Init(size_t workspace_bytes = 32u << 20, int probe_out = 4096, int probe_rows = 256,
                    int probe_in = 4096);
  bool outer_vec_available() const { return outer_vec_available_; }
  // Shapes (rows, out, in) cuBLASLt refused in the outer-vector mode; they use the fallback.
  int outer_vec_refused_shapes() const { return static_cast<int>(outer_vec_refused_.size()); }
  // Forces the fallback (tests use it to check both paths).
  void set_outer_vec_available(bool v) { outer_vec_available_ = v; }
  std::string Describe() const;

  absl::Status Bf16(const uint16_t* x, const uint16_t* w, int rows, int out, int in, void* y,
                    GemmOut out_type, cudaStream_t stream);

  // Per-channel (per-token × per-output-channel) FP8; y is bf16. `fallback_acc` is an f32
  // buffer of at least rows × out elements, used only on the fallback path (may be null when
  // outer_vec_available()).
  absl::Status Fp8RowCol(const uint8_t* x, const float* x_scale, const uint8_t* w,
                         const float* w_scale, int rows, int out, int in, uint16_t* y,
                         float* fallback_acc, cudaStream_t stream);

  // Per-tensor FP8: x_scale and w_scale each point at one device float; y is bf16.
  absl::Status Fp8PerTensor(const uint8_t* x, const float* x_scale, const uint8_t* w,
                            const float* w_scale, int rows, int out, int in, uint16_t* y,
                            cudaStream_t stream);

 private:
  enum class Kind { kBf16ToBf16, kBf16ToF32, kFp8OuterVec, kFp8UnitToF32, kFp8Tensor };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int, int, int, int>;  // kind, rows, out, in

  absl::StatusOr<Plan*> GetPlan(Kind kind, int rows, int out, int in);
  absl::Status Run(Plan* plan, const void* a, const void* b, void* d, const float* a_scale,
                   const float* b_scale, cudaStream_t stream);
  static void Destroy(Plan& p);

  LtHandle handle_;
  DeviceBuffer workspace_;
  bool outer_vec_available_ = false;
  std::set<std::tuple<int, int, int>> outer_vec_refused_;  // rows, out, in: fallback shapes
  std::string outer_vec_error_;  // cuBLASLt's last refusal of the outer-vector mode
  std::map<Key, Plan> plans_;
};

}  // namespace gecd::kernels

#endif  // GECD_KERNELS_GEMM_H_
