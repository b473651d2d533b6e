// generator.h — the per-device random number generator.
//
// An openreg generator owns a CPU generator (mt19937 + normal cache) as its
// engine. Random kernels run CPU code on device memory, so the fallback hands
// them the engine in place of the openreg generator: the same seed therefore
// gives the same numbers on openreg as on the CPU, which makes differential
// tests of random ops exact.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace torch_openreg {

class GeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit GeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The CPU generator that random kernels actually draw from.
  at::Generator engine() const { return engine_; }

 private:
  GeneratorImpl* clone_impl() const override;
  void waitForQueuedDraws() const;
  // Mutable: at::Generator's accessors are non-const even for reads.
  mutable at::Generator engine_;
};

const at::Generator& defaultGenerator(c10::DeviceIndex device);
at::Generator newGenerator(c10::DeviceIndex device);
// For a generator argument of an op: the CPU engine behind an openreg generator.
at::Generator engineOf(const at::Generator& generator);

}  // namespace torch_openreg
