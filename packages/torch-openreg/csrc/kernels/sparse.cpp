// sparse.cpp — native kernels for sparse openreg tensors (COO, CSR, CSC, BSR, BSC).
//
// Sparse openreg tensors are PyTorch's own sparse TensorImpls whose members
// (indices, values, compressed/plain indices) are dense openreg tensors, as
// on CUDA. Operators that compute run the CPU's sparse kernels on CPU aliases
// through the fallback (engine/sparse_context.cpp), synchronously. The
// operators here only build such tensors, read or replace their members, or
// copy members with dense copies: PyTorch's own implementations of them are
// device-generic, so they serve openreg directly — asynchronously, without
// a round trip through the stream — under a device guard (which PyTorch's
// generated wrappers add for CUDA, and a direct registration does not).
#include <ATen/core/Tensor.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_dimI_native.h>
#include <ATen/ops/_dimV_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/values_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>

namespace torch_openreg {
namespace {

// ---- Factories -----------------------------------------------------------------

at::Tensor emptyCoo(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                    std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                    std::optional<bool> pinMemory, std::optional<c10::MemoryFormat> memoryFormat) {
  c10::OptionalDeviceGuard guard(device);
  return at::native::empty_sparse_symint(size, dtype, layout, device, pinMemory, memoryFormat);
}

at::Tensor emptyCompressed(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                           std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                           std::optional<bool> pinMemory,
                           std::optional<c10::MemoryFormat> memoryFormat) {
  c10::OptionalDeviceGuard guard(device);
  return at::native::empty_sparse_compressed_symint(size, dtype, layout, device, pinMemory,
                                                    memoryFormat);
}

at::Tensor cooWithDims(int64_t sparseDim, int64_t denseDim, at::IntArrayRef size,
                       std::optional<at::ScalarType> dtype, std::optional<c10::Layout> layout,
                       std::optional<c10::Device> device, std::optional<bool> pinMemory) {
  c10::OptionalDeviceGuard guard(device);
  return at::native::new_with_dims_sparse(sparseDim, denseDim, size, dtype, layout, device,
                                          pinMemory);
}

at::Tensor cooWithDimsAndTensors(int64_t sparseDim, int64_t denseDim, c10::SymIntArrayRef size,
                                 const at::Tensor& indices, const at::Tensor& values,
                                 std::optional<at::ScalarType> dtype,
                                 std::optional<c10::Layout> layout,
                                 std::optional<c10::Device> device, std::optional<bool> pinMemory,
                                 std::optional<bool> isCoalesced) {
  c10::OptionalDeviceGuard guard(device ? device : std::optional(values.device()));
  return at::native::new_with_dims_and_tensor_sparse_symint(
      sparseDim, denseDim, size, indices, values, dtype, layout, device, pinMemory, isCoalesced);
}

// ---- Copies (member by member, with dense copies: also across devices) ----------

at::Tensor& copyCoo(at::Tensor& self, const at::Tensor& source, bool nonBlocking) {
  c10::OptionalDeviceGuard guard(self.device());
  return at::native::copy_sparse_wrapper_(self, source, nonBlocking);
}

at::Tensor& copyCooToCoo(at::Tensor& self, const at::Tensor& source, bool nonBlocking) {
  c10::OptionalDeviceGuard guard(self.device());
  return at::native::copy_sparse_(self, source, nonBlocking);
}

at::Tensor& copyCompressed(at::Tensor& self, const at::Tensor& source, bool nonBlocking) {
  c10::OptionalDeviceGuard guard(self.device());
  return at::native::copy_sparse_compressed_(self, source, nonBlocking);
}

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(emptyCoo));
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(cooWithDims));
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", TORCH_FN(cooWithDimsAndTensors));
  m.impl("copy_", TORCH_FN(copyCoo));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(copyCooToCoo));
  // Members and metadata.
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_dimI", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("_dimV", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(emptyCompressed));
  m.impl("copy_", TORCH_FN(copyCompressed));
  // Members and metadata.
  m.impl("crow_indices", TORCH_FN(at::native::crow_indices_sparse_csr));
  m.impl("col_indices", TORCH_FN(at::native::col_indices_sparse_csr));
  m.impl("ccol_indices", TORCH_FN(at::native::ccol_indices_sparse_csr));
  m.impl("row_indices", TORCH_FN(at::native::row_indices_sparse_csr));
  m.impl("values", TORCH_FN(at::native::values_sparse_csr));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse_csr));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse_csr));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse_csr));
}

}  // namespace
}  // namespace torch_openreg
