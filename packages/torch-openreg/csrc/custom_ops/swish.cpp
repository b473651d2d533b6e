// custom_ops.cpp — a backend-specific operator with an autograd formula.
//
// torch.ops.openreg.swish(x) = x * sigmoid(x), the pattern for adding an
// operator of your own:
//   1. declare its schema (TORCH_LIBRARY);
//   2. give it kernels per backend: a hand-written loop over device memory for
//      openreg (enqueued with launchOnDevice, through KernelContext aliases)
//      and ATen ops for the CPU;
//   3. give it a derivative (a torch::autograd::Function registered for the
//      Autograd key), so it trains like any built-in operator.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/sigmoid.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <cmath>

#include "engine/kernel_context.h"
#include "engine/kernel_launch.h"

namespace torch_openreg {
namespace {

at::Tensor swishOpenReg(const at::Tensor& x) {
  // Validate on the host: a kernel's own failure would only surface at the
  // next synchronization.
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(x.scalar_type()),
                              "\"openreg_swish\" not implemented for '",
                              c10::toString(x.scalar_type()), "'");
  const at::Tensor input = x.contiguous();
  at::Tensor output = at::empty_like(input, at::MemoryFormat::Contiguous);
  const c10::DeviceIndex device = input.device().index();
  // A hand-written kernel says what it touches, as the boxed fallback does
  // for ATen's operators: the launch path checks races from that.
  const LaunchSpec spec{LaunchContext::forDevice(device), "openreg::swish", input, output};
  KernelContext context(device);
  launchOnDevice(spec, [in = context.alias(input), out = context.alias(output)] {
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, in.scalar_type(), "openreg_swish", [&] {
          using compute_t = at::opmath_type<scalar_t>;  // float for half/bfloat16
          const scalar_t* source = in.const_data_ptr<scalar_t>();
          scalar_t* target = out.mutable_data_ptr<scalar_t>();
          for (int64_t i = 0; i < in.numel(); ++i) {
            const compute_t x = static_cast<compute_t>(source[i]);
            target[i] = static_cast<scalar_t>(x / (compute_t(1) + std::exp(-x)));
          }
        });
  });
  return output;
}

at::Tensor swishCpu(const at::Tensor& x) { return x * at::sigmoid(x); }

at::Tensor callSwish(const at::Tensor& x) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("openreg::swish", "")
                       .typed<at::Tensor(const at::Tensor&)>();
  return op.call(x);
}

class SwishFunction : public torch::autograd::Function<SwishFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* context, const at::Tensor& x) {
    context->save_for_backward({x});
    at::AutoDispatchBelowADInplaceOrView belowAutograd;
    return callSwish(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list gradOutputs) {
    const at::Tensor x = context->get_saved_variables()[0];
    const at::Tensor s = at::sigmoid(x);
    return {gradOutputs[0] * (s + x * s * (1 - s))};
  }
};

at::Tensor swishAutograd(const at::Tensor& x) { return SwishFunction::apply(x); }

TORCH_LIBRARY(openreg, m) { m.def("swish(Tensor x) -> Tensor"); }

TORCH_LIBRARY_IMPL(openreg, PrivateUse1, m) { m.impl("swish", TORCH_FN(swishOpenReg)); }
TORCH_LIBRARY_IMPL(openreg, CPU, m) { m.impl("swish", TORCH_FN(swishCpu)); }
TORCH_LIBRARY_IMPL(openreg, Autograd, m) { m.impl("swish", TORCH_FN(swishAutograd)); }

}  // namespace
}  // namespace torch_openreg
