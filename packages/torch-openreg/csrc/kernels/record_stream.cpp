// record_stream.cpp — Tensor.record_stream: memory used on another stream.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "integration/device_allocator.h"

namespace torch_openreg {
namespace {

void recordStream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "record_stream of an openreg tensor expects an openreg stream, got a ",
              stream.device_type(), " stream");
  deviceAllocator().recordStream(self.storage().data_ptr(), stream);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("record_stream", TORCH_FN(recordStream)); }

}  // namespace
}  // namespace torch_openreg
