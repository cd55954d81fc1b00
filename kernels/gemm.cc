#include "kernels/gemm.h"

#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "kernels/activation.h"

namespace gecd::kernels {
namespace {

template <typename T>
cublasStatus_t SetAttr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                       const T& value) {
  return cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value));
}

}  // namespace

GemmRunner::~GemmRunner() {
  for (auto& [key, plan] : plans_) Destroy(plan);
}

void GemmRunner::Destroy(Plan& p) {
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  if (p.d) cublasLtMatrixLayoutDestroy(p.d);
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  p = Plan{};
}

absl::Status GemmRunner::Init(size_t workspace_bytes, int probe_out, int probe_rows, int probe_in) {
  if (handle_.get() == nullptr) {
    auto st = handle_.Create();
    if (!st.ok()) return st;
    st = workspace_.Allocate(workspace_bytes);
    if (!st.ok()) return st;
  }
  auto plan = GetPlan(Kind::kFp8OuterVec, probe_rows, probe_out, probe_in);
  outer_vec_available_ = plan.ok();
  if (!plan.ok()) outer_vec_error_ = std::string(plan.status().message());
  return absl::OkStatus();
}

std::string GemmRunner::Describe() const {
  if (!outer_vec_available_) {
    return absl::StrCat(
        "FP8 per-channel GEMM: unit-scale cuBLASLt GEMM to f32 + ScaleRowsCols (OUTER_VEC_32F: ",
        outer_vec_error_.empty() ? std::string("disabled") : outer_vec_error_, ")");
  }
  std::string s = "FP8 per-channel GEMM: cuBLASLt OUTER_VEC_32F scales (fused)";
  if (!outer_vec_refused_.empty()) {
    absl::StrAppend(&s, "; fallback for ", outer_vec_refused_.size(), " refused shape(s), e.g.");
    int shown = 0;
    for (const auto& [rows, out, in] : outer_vec_refused_) {
      if (++shown > 4) break;
      absl::StrAppend(&s, " ", rows, "x", out, "x", in);
    }
    absl::StrAppend(&s, " (", outer_vec_error_, ")");
  }
  return s;
}

absl::StatusOr<GemmRunner::Plan*> GemmRunner::GetPlan(Kind kind, int rows, int out, int in) {
  const Key key{static_cast<int>(kind), rows, out, in};
  if (auto it = plans_.find(key); it != plans_.end()) return &it->second;
  if (rows <= 0 || out <= 0 || in <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GEMM shape rows ", rows, " out ", out, " in ", in));
  }
  const bool fp8 =
      kind == Kind::kFp8OuterVec || kind == Kind::kFp8UnitToF32 || kind == Kind::kFp8Tensor;
  if (fp8 && (in % 16 != 0 || out % 8 != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("FP8 GEMM needs in % 16 == 0 and out % 8 == 0, got out ", out, " in ", in));
  }
  const cudaDataType_t ab_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  const bool f32_out = kind == Kind::kBf16ToF32 || kind == Kind::kFp8UnitToF32;
  const cudaDataType_t d_type = f32_out ? CUDA_R_32F : CUDA_R_16BF;

  Plan p;
  auto fail = [&](absl::Status st) {
    Destroy(p);
    return st;
  };
  absl::Status st;
  st = CublasStatus(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                    "cublasLtMatmulDescCreate");
  if (!st.ok()) return fail(st);
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  st = CublasStatus(SetAttr(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, op_t), "set TRANSA");
  if (!st.ok()) return fail(st);
  st = CublasStatus(SetAttr(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, op_n), "set TRANSB");
  if (!st.ok()) return fail(st);
  if (kind == Kind::kFp8OuterVec) {
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    st = CublasStatus(SetAttr(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode),
                      "set A_SCALE_MODE OUTER_VEC_32F");
    if (!st.ok()) return fail(st);
    st = CublasStatus(SetAttr(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode),
                      "set B_SCALE_MODE OUTER_VEC_32F");
    if (!st.ok()) return fail(st);
  }
  // A = W: stored [in, out] column-major (row-major [out, in]), op T gives [out, in].
  st = CublasStatus(cublasLtMatrixLayoutCreate(&p.a, ab_type, in, out, in), "layout A");
  if (!st.ok()) return fail(st);
  // B = x: [in, rows] column-major (row-major [rows, in]).
  st = CublasStatus(cublasLtMatrixLayoutCreate(&p.b, ab_type, in, rows, in), "layout B");
  if (!st.ok()) return fail(st);
  // C (unused: beta = 0) has D's type and layout, as cuBLASLt requires for these types.
  st = CublasStatus(cublasLtMatrixLayoutCreate(&p.c, d_type, out, rows, out), "layout C");
  if (!st.ok()) return fail(st);
  st = CublasStatus(cublasLtMatrixLayoutCreate(&p.d, d_type, out, rows, out), "layout D");
  if (!st.ok()) return fail(st);

  cublasLtMatmulPreference_t pref = nullptr;
  st = CublasStatus(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  if (!st.ok()) return fail(st);
  const uint64_t ws = workspace_.bytes();
  st = CublasStatus(cublasLtMatmulPreferenceSetAttribute(
                        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                    "set MAX_WORKSPACE_BYTES");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st.ok()) {
    st = CublasStatus(cublasLtMatmulAlgoGetHeuristic(handle_.get(), p.desc, p.a, p.b, p.c, p.d,
                                                     pref, 1, &result, &found),
                      "cublasLtMatmulAlgoGetHeuristic");
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (!st.ok()) return fail(st);
  if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    return fail(absl::UnimplementedError(absl::StrCat("cuBLASLt has no algorithm for GEMM kind ",
                                                      static_cast<int>(kind), " rows ", rows,
                                                      " out ", out, " in ", in)));
  }
  p.algo = result.algo;
  return &plans_.emplace(key, p).first->second;
}

absl::Status GemmRunner::Run(Plan* plan, const void* a, const void* b, void* d,
                             const float* a_scale, const float* b_scale, cudaStream_t stream) {
  if (a_scale != nullptr) {
    GECD_CUBLAS_RETURN(SetAttr(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale));
    GECD_CUBLAS_RETURN(SetAttr(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale));
  }
  const float alpha = 1.0f, beta = 0.0f;
  return CublasStatus(
      cublasLtMatmul(handle_.get(), plan->desc, &alpha, a, plan->a, b, plan->b, &beta, d, plan->c,
                     d, plan->d, &plan->algo, workspace_.get(), workspace_.bytes(), stream),
      "cublasLtMatmul");
}

absl::Status GemmRunner::Bf16(const uint16_t* x, const uint16_t* w, int rows, int out, int in,
                              void* y, GemmOut out_type, cudaStream_t stream) {
  auto plan =
      GetPlan(out_type == GemmOut::kF32 ? Kind::kBf16ToF32 : Kind::kBf16ToBf16, rows, out, in);
  if (!plan.ok()) return plan.status();
  return Run(*plan, w, x, y, nullptr, nullptr, stream);
}

absl::Status GemmRunner::Fp8RowCol(const uint8_t* x, const float* x_scale, const uint8_t* w,
                                   const float* w_scale, int rows, int out, int in, uint16_t* y,
                                   float* fallback_acc, cudaStream_t stream) {
  const std::tuple<int, int, int> shape{rows, out, in};
  if (outer_vec_available_ && !outer_vec_refused_.contains(shape)) {
    auto plan = GetPlan(Kind::kFp8OuterVec, rows, out, in);
    absl::Status st = plan.status();
    if (st.ok()) st = Run(*plan, w, x, y, w_scale, x_scale, stream);
    // Our own shape check fails the fallback too; anything cuBLASLt refuses for this shape (no
    // algorithm, NOT_SUPPORTED, INVALID_VALUE) runs the fallback, for this shape from now on.
    if (st.ok() || absl::IsInvalidArgument(st)) return st;
    outer_vec_refused_.insert(shape);
    outer_vec_error_ = std::string(st.message());
  }
  if (fallback_acc == nullptr) {
    return absl::FailedPreconditionError("FP8 fallback GEMM needs an f32 accumulator buffer");
  }
  auto plan = GetPlan(Kind::kFp8UnitToF32, rows, out, in);
  if (!plan.ok()) return plan.status();
  absl::Status st = Run(*plan, w, x, fallback_acc, nullptr, nullptr, stream);
  if (!st.ok()) return st;
  return CudaStatus(LaunchScaleRowsCols(fallback_acc, x_scale, w_scale, rows, out, y, stream),
                    "ScaleRowsCols");
}

absl::Status GemmRunner::Fp8PerTensor(const uint8_t* x, const float* x_scale, const uint8_t* w,
                                      const float* w_scale, int rows, int out, int in, uint16_t* y,
                                      cudaStream_t stream) {
  auto plan = GetPlan(Kind::kFp8Tensor, rows, out, in);
  if (!plan.ok()) return plan.status();
  return Run(*plan, w, x, y, w_scale, x_scale, stream);
}

}  // namespace gecd::kernels
