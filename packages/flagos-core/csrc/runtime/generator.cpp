#include "runtime/generator.h"

#include <array>
#include <mutex>

#include "runtime/hal.h"

namespace flagos {

FlagosGeneratorImpl::FlagosGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      cpu_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

void FlagosGeneratorImpl::set_current_seed(uint64_t seed) { cpu_.set_current_seed(seed); }
void FlagosGeneratorImpl::set_offset(uint64_t offset) { cpu_.set_offset(offset); }
uint64_t FlagosGeneratorImpl::get_offset() const { return cpu_.get_offset(); }
uint64_t FlagosGeneratorImpl::current_seed() const { return cpu_.current_seed(); }
uint64_t FlagosGeneratorImpl::seed() { return cpu_.seed(); }

void FlagosGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  cpu_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> FlagosGeneratorImpl::get_state() const {
  return cpu_.unsafeGetGeneratorImpl()->get_state();
}

FlagosGeneratorImpl* FlagosGeneratorImpl::clone_impl() const {
  auto* gen = new FlagosGeneratorImpl(device().index());
  gen->cpu_ = cpu_.clone();
  return gen;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::array<at::Generator, 64> gens;
  static std::array<std::once_flag, 64> once;
  if (device < 0) device = current_device();
  hal_device(device);
  std::call_once(once[device], [device] {
    gens[device] = at::make_generator<FlagosGeneratorImpl>(device);
    gens[device].set_current_seed(c10::default_rng_seed_val);
  });
  return gens[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  return at::make_generator<FlagosGeneratorImpl>(device);
}

}  // namespace flagos
