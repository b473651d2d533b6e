// quantized.cpp — quantized tensors are refused on openreg, at creation and at .to().
//
// Why not support them like everything else (the CPU's kernels on aliases):
// quantized tensors need a QTensorImpl carrying a quantizer, their CPU
// operators run through engines (fbgemm, qnnpack, onednn) that keep packed
// weights in host-memory objects, and PyTorch has deprecated the creation
// functions of these dtypes (torch.ao's successors quantize through ordinary
// dense tensors, which openreg runs). Half-supported, they would be silently
// wrong objects (a qint8 tensor without its scale); refused, the user gets one
// clear error naming what to do.
//
// Every route to a quantized openreg tensor is closed here: operators on the
// QuantizedPrivateUse1 key (quantized factories with device="openreg", and
// the empty_quantized that .to("openreg") of a quantized tensor calls), and
// the operators that quantize a dense openreg tensor.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace torch_openreg {
namespace {

[[noreturn]] void refuseQuantized(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "openreg does not support quantized tensors (", op.schema().name(),
      " would make one on an openreg device). Keep quantized tensors on the CPU, or move the float "
      "values instead (tensor.dequantize().to(\"openreg\")). Supported on openreg: strided, nested "
      "and sparse (COO, CSR, CSC, BSR, BSC) tensors of non-quantized dtypes.");
}

void refuse(const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/, torch::jit::Stack* stack) {
  refuseQuantized(op, stack);
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse>());
}

// Operators that take a dense tensor and return a quantized one.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name :
       {"quantize_per_tensor", "quantize_per_tensor.tensor_qparams", "quantize_per_tensor.tensors",
        "quantize_per_channel", "quantize_per_tensor_dynamic", "_make_per_tensor_quantized_tensor",
        "_make_per_channel_quantized_tensor"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&refuse>());
  }
}

}  // namespace
}  // namespace torch_openreg
