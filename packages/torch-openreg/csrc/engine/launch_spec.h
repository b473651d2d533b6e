// launch_spec.h — what one piece of stream work is, for the launch path.
//
// Every launch (an operator's kernel, a copy, a fill, a compiled kernel, a
// collective, a custom operator) goes through kernel_launch.h with a
// LaunchSpec: where it runs, what it is called, which tensors it reads and
// writes, and whether the program asked to wait for it. From that the launch
// path does what every launch needs — the race detector's check, the
// profiler's record, the sync debug mode's check — so that no launch site can
// forget one.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>

#include <string>

#include "base/device_activity.h"
#include "engine/launch_context.h"

namespace torch_openreg {

// A launch's name in race reports, made only when one is needed: a static
// string, a string the caller keeps alive, or an operator's name.
class OperationName {
 public:
  // Implicit by design: a spec names its launch in place.
  OperationName(const char* name) : literal_(name) {}  // NOLINT(google-explicit-constructor)
  OperationName(const std::string& name) : text_(&name) {}  // NOLINT(google-explicit-constructor)
  OperationName(const c10::OperatorHandle& op) : op_(&op) {}  // NOLINT(google-explicit-constructor)
  std::string str() const;
  const c10::OperatorHandle* op() const { return op_; }
  // True if the name is a string the caller owns: work that outlives the
  // launch site keeps a copy of it.
  bool borrowsText() const { return text_ != nullptr; }

 private:
  const char* literal_ = nullptr;
  const std::string* text_ = nullptr;
  const c10::OperatorHandle* op_ = nullptr;
};

struct LaunchSpec {
  LaunchContext context;
  OperationName operation;
  // The tensors the work reads and writes (host tensors are ignored)... Views
  // that must outlive the spec: pass one tensor as it is (`self`, not
  // `{self}`, whose temporary list would be gone after the declaration).
  c10::ArrayRef<at::Tensor> reads = {};
  c10::ArrayRef<at::Tensor> writes = {};
  // ...and, for an operator call (`operation` names the operator), its
  // arguments: the schema says which it writes (listed only when a check
  // needs them).
  c10::ArrayRef<c10::IValue> arguments = {};
  // How the profiler shows the work: kernels by the launching operator,
  // copies and collectives by this label (a static string).
  ActivityKind activity = ActivityKind::Kernel;
  const char* activityLabel = nullptr;
  // Set when the program itself waits for this work, as it would on CUDA
  // (.item(), a blocking copy, a data-dependent result): named for the sync
  // debug mode (null: the backend's own choice to wait, which is silent).
  const char* synchronizes = nullptr;
  // The host waits for the work and everything before it on the stream, as
  // on CUDA: later launches are ordered after it (race detection).
  bool hostWaits = false;
  // The first call of its operator signature, run synchronously to confirm
  // its plan (plan.h): a graph capture asks the user to warm up instead.
  bool firstCall = false;
  // The work runs operators on CPU aliases: in the kernel environment (CPU
  // allocations from the device, below autograd, the launching stream
  // current). False for work that only hands off or waits (a collective's
  // issue, a wait for it), which must not change what the code it calls sees.
  bool kernelEnvironment = true;
};

}  // namespace torch_openreg
