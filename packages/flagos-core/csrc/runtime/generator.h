// The flagos generator: one default generator per device. Random ops that run as CPU
// kernels (the CPU fallback, or the twin engine on sim's CPU twin) draw from its inner
// CPU generator; on a device twin (CUDA) the twin's kernels draw from its inner twin
// generator (the twin device type's own, e.g. a CUDA philox generator). Seeds and states cover both, so
// torch.manual_seed / torch.flagos.manual_seed reproduce results through every route.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

namespace flagos {

class FlagosGeneratorImpl : public c10::GeneratorImpl {
 public:
  // `is_default`: the device's default generator, whose device twin generator is the twin
  // device's default one (kernels of ops without a generator argument, such as dropout,
  // draw from that), so that seeding flagos seeds them too.
  explicit FlagosGeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val,
                               bool is_default = false);
  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }
  // The generator that kernels of `twin` draw from on behalf of this generator.
  at::Generator& generator_for(c10::DeviceType twin) {
    return twin == c10::DeviceType::CPU || !device_twin_.defined() ? cpu_ : device_twin_;
  }

 private:
  FlagosGeneratorImpl* clone_impl() const override;
  at::Generator cpu_;
  at::Generator device_twin_;  // undefined unless the device has a device twin
  size_t cpu_state_bytes_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

}  // namespace flagos
