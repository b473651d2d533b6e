// tensor_layout.h — a tensor's layout without its data, and tensors made from one.
//
// The engine describes tensors it has not allocated yet (planned outputs) and
// makes tensors over storage it already has (CPU aliases over the kernel
// view, meta shadows, device tensors over memory a kernel allocated). These
// are the one place that builds such TensorImpls.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>
#include <c10/util/SmallVector.h>

#include "engine/launch_context.h"

namespace torch_openreg {

// Sizes and strides of at most 6 dimensions live inline: layouts are built
// for every operator call, and heap allocations there cost measurable time.
using Dimensions = c10::SmallVector<int64_t, 6>;

struct TensorLayout {
  Dimensions sizes;
  Dimensions strides;
  int64_t storageOffset = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool defined = false;

  // The layout `tensor` has now (undefined for an undefined tensor).
  static TensorLayout of(const at::Tensor& tensor);
  // Same sizes, strides and storage offset.
  bool matches(const at::Tensor& tensor) const;
};

// A dense tensor of dispatch key `key` over `storage`, with the sizes,
// strides, offset, dtype and conjugate/negative bits of `like`.
at::Tensor tensorOver(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like);
// The same with a planned layout.
at::Tensor tensorOver(c10::Storage storage, c10::DispatchKey key, const TensorLayout& layout);

// A new openreg tensor with the sizes, strides and dtype of `layout` at
// storage offset 0 (undefined if the layout is), allocated on the context's
// device for its stream.
at::Tensor emptyWithLayout(const TensorLayout& layout, const LaunchContext& context);

}  // namespace torch_openreg
