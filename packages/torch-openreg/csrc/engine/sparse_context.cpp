// sparse_context.cpp — KernelContext for sparse tensors (see kernel_context.h).
//
// A sparse openreg tensor is what a sparse CUDA tensor is: a SparseTensorImpl
// (COO) or SparseCsrTensorImpl (CSR, CSC, BSR, BSC) whose members — indices
// and values, or compressed indices, plain indices and values — are dense
// openreg tensors. Its CPU alias is the same kind of TensorImpl with the
// CPU's sparse dispatch key over CPU aliases of the members, so the CPU's
// sparse kernels run on device memory unchanged, as dense kernels do.
// Results map back member by member: a member that is an argument's member
// (a kernel returning a view, or its input unchanged) becomes that member
// again, a member allocated by the kernel becomes an openreg tensor owning
// that memory (KernelContext::adopt). A sparse argument that a kernel changed
// in place (new members, new sizes, the coalesced flag) is updated the same
// way.
#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseCsrTensorUtils.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/native/SparseTensorUtils.h>

#include "base/device.h"
#include "engine/kernel_context.h"

namespace torch_openreg {
namespace {

at::Tensor makeCoo(c10::DispatchKey key, const at::Tensor& like, const at::Tensor& indices,
                   const at::Tensor& values) {
  // The impl takes its device from the current one: make it the members'.
  c10::OptionalDeviceGuard guard(values.device());
  at::Tensor made =
      at::detail::make_tensor<at::SparseTensorImpl>(c10::DispatchKeySet(key), like.dtype());
  at::SparseTensorImpl* impl = at::sparse::get_sparse_impl(made);
  const at::SparseTensorImpl* source = at::sparse::get_sparse_impl(like);
  impl->raw_resize_(source->sparse_dim(), source->dense_dim(), like.sizes());
  impl->set_indices_and_values_unsafe(indices, values);
  impl->set_coalesced(source->coalesced());
  return made;
}

at::Tensor makeCompressed(c10::DispatchKey key, const at::Tensor& like,
                          const at::Tensor& compressed, const at::Tensor& plain,
                          const at::Tensor& values) {
  at::Tensor made = at::detail::make_tensor<at::SparseCsrTensorImpl>(
      c10::DispatchKeySet(key), values.device(), like.layout(), like.dtype());
  at::sparse_csr::get_sparse_csr_impl(made)->set_member_tensors(compressed, plain, values,
                                                                like.sizes());
  return made;
}

// The members of a sparse tensor, in a fixed order.
c10::SmallVector<at::Tensor, 3> membersOf(const at::Tensor& sparse) {
  if (sparse.layout() == c10::kSparse) {
    const at::SparseTensorImpl* impl = at::sparse::get_sparse_impl(sparse);
    return {impl->indices(), impl->values()};
  }
  const at::SparseCsrTensorImpl* impl = at::sparse_csr::get_sparse_csr_impl(sparse);
  return {impl->compressed_indices(), impl->plain_indices(), impl->values()};
}

// A sparse tensor like `like`, of dispatch key `coo` or `compressed`, over `members`.
at::Tensor rebuild(const at::Tensor& like, c10::DispatchKey coo, c10::DispatchKey compressed,
                   const c10::SmallVector<at::Tensor, 3>& members) {
  if (like.layout() == c10::kSparse) return makeCoo(coo, like, members[0], members[1]);
  return makeCompressed(compressed, like, members[0], members[1], members[2]);
}

}  // namespace

KernelContext::SparseAlias* KernelContext::findSparseAlias(const at::TensorImpl* original) {
  for (SparseAlias& entry : sparseAliases_) {
    if (entry.original.unsafeGetTensorImpl() == original) return &entry;
  }
  return nullptr;
}

at::Tensor KernelContext::aliasSparse(const at::Tensor& tensor) {
  if (SparseAlias* cached = findSparseAlias(tensor.unsafeGetTensorImpl())) return cached->alias;
  c10::SmallVector<at::Tensor, 3> originals = membersOf(tensor);
  c10::SmallVector<at::Tensor, 3> aliases;
  for (const at::Tensor& member : originals) aliases.push_back(alias(member));
  at::Tensor made =
      rebuild(tensor, c10::DispatchKey::SparseCPU, c10::DispatchKey::SparseCsrCPU, aliases);
  sparseAliases_.push_back(
      SparseAlias{tensor, std::move(made), std::move(originals), std::move(aliases)});
  return sparseAliases_.back().alias;
}

at::Tensor KernelContext::adoptMember(const at::Tensor& member, bool writeBackOriginal) {
  for (const SparseAlias& sparse : sparseAliases_) {
    for (size_t i = 0; i < sparse.memberAliases.size(); ++i) {
      if (sparse.memberAliases[i].unsafeGetTensorImpl() != member.unsafeGetTensorImpl()) continue;
      const at::Tensor& original = sparse.originalMembers[i];
      if (writeBackOriginal) writeBack(original);  // a member resized in place
      return original;
    }
  }
  return adopt(member);
}

at::Tensor KernelContext::adoptSparse(const at::Tensor& result) {
  // A kernel may return its (sparse) argument itself, e.g. coalesce() of a
  // coalesced tensor: the result is that argument, as on the CPU.
  for (const SparseAlias& sparse : sparseAliases_) {
    if (sparse.alias.unsafeGetTensorImpl() == result.unsafeGetTensorImpl()) return sparse.original;
  }
  DeviceScope scope(device_);
  c10::SmallVector<at::Tensor, 3> members = membersOf(result);
  for (at::Tensor& member : members) member = adoptMember(member, false);
  return rebuild(result, c10::DispatchKey::SparsePrivateUse1,
                 c10::DispatchKey::SparseCsrPrivateUse1, members);
}

void KernelContext::writeBackSparse(const at::Tensor& original) {
  SparseAlias* entry = findSparseAlias(original.unsafeGetTensorImpl());
  if (entry == nullptr) return;
  const at::Tensor& changed = entry->alias;
  TORCH_CHECK(changed.layout() == original.layout(), "openreg: a kernel changed the layout of a ",
              original.layout(), " tensor it writes in place to ", changed.layout());
  DeviceScope scope(device_);
  c10::SmallVector<at::Tensor, 3> members = membersOf(changed);
  for (at::Tensor& member : members) member = adoptMember(member, true);
  if (original.layout() == c10::kSparse) {
    at::SparseTensorImpl* impl = at::sparse::get_sparse_impl(original);
    const at::SparseTensorImpl* source = at::sparse::get_sparse_impl(changed);
    impl->raw_resize_(source->sparse_dim(), source->dense_dim(), changed.sizes());
    impl->set_indices_and_values_unsafe(members[0], members[1]);
    impl->set_coalesced(source->coalesced());
  } else {
    at::sparse_csr::get_sparse_csr_impl(original)->set_member_tensors(members[0], members[1],
                                                                      members[2], changed.sizes());
  }
}

}  // namespace torch_openreg
