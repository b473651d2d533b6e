// fallback_arguments.cpp — device resolution and argument conversion.
#include "engine/fallback_arguments.h"

#include <c10/util/Exception.h>

#include <sstream>
#include <string>

#include "base/device.h"
#include "integration/generator.h"

namespace torch_openreg {
namespace {

// Finds the device an operator runs on and rejects mixed-device arguments
// with the error CUDA gives. CPU tensors may mix only as 0-dim scalars, or
// as indices (Tensor?[] arguments), which CUDA also accepts from the host.
class DeviceResolver {
 public:
  explicit DeviceResolver(const c10::OperatorHandle& op) : op_(op) {}

  void visitTensor(const at::Tensor& tensor, const std::string& argument, bool indices) {
    if (!tensor.defined()) return;
    const c10::Device device = tensor.device();
    if (device.type() == c10::DeviceType::PrivateUse1) {
      if (!device_) device_ = device;
      if (device != *device_) mismatch(device, argument);
      return;
    }
    if (device.type() == c10::DeviceType::CPU && (tensor.dim() == 0 || indices)) return;
    if (device_) mismatch(device, argument);
    foreign_ = device;
    foreignArgument_ = argument;
  }

  void visitDevice(const c10::Device& device) {
    if (device.type() == c10::DeviceType::PrivateUse1 && !requestedDevice_)
      requestedDevice_ = device;
  }

  void visitGenerator(const at::Generator& generator) {
    if (generator.defined() && generator.device().type() == c10::DeviceType::PrivateUse1) {
      openregGenerator_ = true;
    }
  }

  c10::DeviceIndex resolve() {
    if (!device_ && requestedDevice_) device_ = requestedDevice_;
    // Only an openreg generator routed the call here: the op runs elsewhere.
    TORCH_CHECK(device_.has_value() || !openregGenerator_,
                "Expected a 'cpu' device type for generator but found 'openreg' (in ",
                op_.schema().name(), "); use a generator of the tensors' device");
    TORCH_CHECK(device_.has_value(), "openreg fallback for ", op_.schema().name(),
                " found no openreg tensor or device argument");
    if (foreign_) mismatch(*foreign_, foreignArgument_);
    return resolveDevice(device_->index());
  }

 private:
  [[noreturn]] void mismatch(const c10::Device& other, const std::string& argument) {
    std::ostringstream message;
    message << "Expected all tensors to be on the same device, but got " << argument << " is on "
            << other << ", different from other tensors on " << *device_
            << " (when checking argument in method " << op_.schema().name() << ")";
    TORCH_CHECK(false, message.str());
  }

  const c10::OperatorHandle& op_;
  std::optional<c10::Device> device_;
  std::optional<c10::Device> requestedDevice_;
  std::optional<c10::Device> foreign_;
  bool openregGenerator_ = false;
  std::string foreignArgument_;
};

bool isIndexList(const c10::IValue& value) {
  return value.isList() && value.toListRef().size() > 0 &&
         (value.toListRef()[0].isNone() || value.toListRef()[0].isTensor()) &&
         !value.isTensorList();
}

}  // namespace

bool isGeneratorType(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  auto optional = type->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

c10::DeviceIndex findDevice(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> arguments) {
  DeviceResolver resolver(op);
  const auto& schema = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = arguments[i];
    const std::string& name = schema[i].name();
    if (value.isTensor()) {
      resolver.visitTensor(value.toTensor(), name, false);
    } else if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorList())
        resolver.visitTensor(tensor, name, false);
    } else if (value.isList()) {
      const bool indices = isIndexList(value);
      for (const c10::IValue& element : value.toListRef()) {
        if (element.isTensor()) resolver.visitTensor(element.toTensor(), name, indices);
      }
    } else if (value.isDevice()) {
      resolver.visitDevice(value.toDevice());
    } else if (value.isGenerator()) {
      resolver.visitGenerator(value.toGenerator());
    }
  }
  return resolver.resolve();
}

namespace {

// Non-tensor arguments: openreg devices -> CPU, generators -> their CPU
// engines (the device's default one when none is given).
c10::IValue toCpuValue(const c10::IValue& value, const c10::Argument& argument,
                       c10::DeviceIndex device) {
  if (value.isDevice() && value.toDevice().type() == c10::DeviceType::PrivateUse1) {
    return c10::Device(c10::DeviceType::CPU);
  }
  if (isGeneratorType(argument.type())) {
    if (value.isNone()) return engineOf(defaultGenerator(device));
    const at::Generator& generator = value.toGenerator();
    TORCH_CHECK(generator.device().type() == c10::DeviceType::PrivateUse1,
                "Expected a 'openreg' device type for generator but found '",
                generator.device().type(), "'; create it with torch.Generator(device=\"openreg\")");
    return engineOf(generator);
  }
  return value;
}

}  // namespace

c10::IValue toCpuArgument(const c10::IValue& value, const c10::Argument& argument,
                          KernelContext& context) {
  if (value.isTensor() || value.isList()) {
    return mapTensors(value, [&](const at::Tensor& tensor) { return context.alias(tensor); });
  }
  return toCpuValue(value, argument, context.device());
}

c10::IValue recordCpuArgument(const c10::IValue& value, const c10::Argument& argument,
                              DeferredAliases& aliases, c10::DeviceIndex device) {
  if (value.isTensor() || value.isList()) {
    return mapTensors(value, [&](const at::Tensor& tensor) {
      aliases.record(tensor);
      return at::Tensor();
    });
  }
  return toCpuValue(value, argument, device);
}

c10::IValue fillCpuArgument(const c10::IValue& shape, c10::ArrayRef<at::Tensor> aliases,
                            size_t& next) {
  return mapTensors(shape, [&](const at::Tensor& /*placeholder*/) { return aliases[next++]; });
}

c10::IValue fromCpuResult(const c10::IValue& value, KernelContext& context) {
  return mapTensors(value, [&](const at::Tensor& tensor) { return context.adopt(tensor); });
}

bool isMutable(const c10::Argument& argument) {
  return argument.alias_info() != nullptr && argument.alias_info()->isWrite();
}

std::optional<size_t> mutatedArgumentOf(const c10::FunctionSchema& schema, size_t returnIndex) {
  const c10::AliasInfo* info = schema.returns()[returnIndex].alias_info();
  if (info == nullptr || !info->isWrite()) return std::nullopt;
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::AliasInfo* candidate = arguments[i].alias_info();
    if (candidate != nullptr && candidate->isWrite() &&
        candidate->beforeSets() == info->beforeSets()) {
      return i;
    }
  }
  return std::nullopt;
}

void writeBackMutated(const c10::IValue& value, KernelContext& context) {
  if (value.isTensor()) {
    context.writeBack(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorList()) context.writeBack(tensor);
  }
}

bool hasNestedTensor(c10::ArrayRef<c10::IValue> arguments) {
  for (const c10::IValue& value : arguments) {
    if (value.isTensor() && value.toTensor().is_nested()) return true;
  }
  return false;
}

bool hasSparseTensor(c10::ArrayRef<c10::IValue> arguments) {
  for (const c10::IValue& value : arguments) {
    if (value.isTensor() && KernelContext::isSparse(value.toTensor())) return true;
    if (!value.isTensorList()) continue;
    for (const at::Tensor& tensor : value.toTensorList()) {
      if (KernelContext::isSparse(tensor)) return true;
    }
  }
  return false;
}

namespace {

// The CPU keys beyond CPU that a kernel for `tensor` needs: the CPU's
// dispatch picks the nested or sparse kernel over the dense one exactly so.
c10::DispatchKeySet extraCpuKeysOf(const at::Tensor& tensor) {
  if (!tensor.defined() || (tensor.layout() == c10::kStrided && !tensor.is_nested())) return {};
  if (tensor.is_nested()) return c10::DispatchKeySet(c10::DispatchKey::NestedTensorCPU);
  if (tensor.layout() == c10::kSparse) return c10::DispatchKeySet(c10::DispatchKey::SparseCPU);
  if (KernelContext::isSparse(tensor)) return c10::DispatchKeySet(c10::DispatchKey::SparseCsrCPU);
  return {};
}

}  // namespace

c10::DispatchKeySet cpuKeysFor(c10::ArrayRef<c10::IValue> arguments) {
  c10::DispatchKeySet keys(c10::DispatchKey::CPU);
  for (const c10::IValue& value : arguments) {
    if (value.isTensor()) {
      keys = keys | extraCpuKeysOf(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorList()) keys = keys | extraCpuKeysOf(tensor);
    }
  }
  return keys;
}

}  // namespace torch_openreg
