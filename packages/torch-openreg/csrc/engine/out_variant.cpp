// out_variant.cpp — cached out= overload lookup.
#include "engine/out_variant.h"

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch_openreg {
namespace {

bool isTensorType(const c10::TypePtr& type) { return type->kind() == c10::TypeKind::TensorType; }

bool matches(const c10::FunctionSchema& functional, const c10::FunctionSchema& out) {
  const auto& inputs = functional.arguments();
  const auto& candidates = out.arguments();
  const auto& results = functional.returns();
  if (candidates.size() != inputs.size() + results.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (candidates[i].name() != inputs[i].name() || *candidates[i].type() != *inputs[i].type()) {
      return false;
    }
  }
  for (size_t i = 0; i < results.size(); ++i) {
    const c10::Argument& slot = candidates[inputs.size() + i];
    if (!isTensorType(results[i].type()) || !isTensorType(slot.type())) return false;
    if (slot.alias_info() == nullptr || !slot.alias_info()->isWrite()) return false;
  }
  return true;
}

// Overload names of every operator, by operator name (built once: the out=
// overload's name does not follow one rule — sum.dim_IntList's is IntList_out).
const std::unordered_map<std::string, std::vector<std::string>>& overloadsByName() {
  static const auto* index = [] {
    auto* built = new std::unordered_map<std::string, std::vector<std::string>>();
    for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
      (*built)[name.name].push_back(name.overload_name);
    }
    return built;
  }();
  return *index;
}

std::optional<c10::OperatorHandle> findOutVariant(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.operator_name();
  auto overloads = overloadsByName().find(name.name);
  if (overloads == overloadsByName().end()) return std::nullopt;
  for (const std::string& candidate : overloads->second) {
    auto found = c10::Dispatcher::singleton().findOp({name.name, candidate});
    if (found && found->hasSchema() && matches(op.schema(), found->schema()) &&
        found->hasKernelForDispatchKey(c10::DispatchKey::CPU)) {
      return found;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<c10::OperatorHandle> outVariantOf(const c10::OperatorHandle& op) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::optional<c10::OperatorHandle>> cache;
  const c10::OperatorName& name = op.operator_name();
  const std::string key = name.name + "." + name.overload_name;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = cache.find(key);
  if (found == cache.end()) found = cache.emplace(key, findOutVariant(op)).first;
  return found->second;
}

}  // namespace torch_openreg
