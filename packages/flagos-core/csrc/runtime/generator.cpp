#include "runtime/generator.h"

#include <ATen/Context.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>

#include <array>
#include <cstring>
#include <mutex>

#include "runtime/hal.h"
#include "runtime/twin.h"

namespace flagos {

FlagosGeneratorImpl::FlagosGeneratorImpl(c10::DeviceIndex device, uint64_t seed,
                                         bool is_default)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      cpu_(at::make_generator<at::CPUGeneratorImpl>(seed)) {
  cpu_state_bytes_ = cpu_.get_state().nbytes();
  if (auto twin = device_twin(device)) {
    at::globalContext().lazyInitDevice(twin->type());
    const auto& hooks = at::globalContext().getAcceleratorHooksInterface(twin->type());
    device_twin_ = is_default ? hooks.getDefaultGenerator(twin->index())
                              : hooks.getNewGenerator(twin->index());
    device_twin_.set_current_seed(seed);
  }
}

void FlagosGeneratorImpl::set_current_seed(uint64_t seed) {
  cpu_.set_current_seed(seed);
  if (device_twin_.defined()) device_twin_.set_current_seed(seed);
}
// The offset is the philox offset of a device twin (CUDA); the CPU's mt19937 has none.
void FlagosGeneratorImpl::set_offset(uint64_t offset) {
  (device_twin_.defined() ? device_twin_ : cpu_).set_offset(offset);
}
uint64_t FlagosGeneratorImpl::get_offset() const {
  return device_twin_.defined() ? device_twin_.get_offset() : cpu_.get_offset();
}
uint64_t FlagosGeneratorImpl::current_seed() const { return cpu_.current_seed(); }
uint64_t FlagosGeneratorImpl::seed() {
  uint64_t s = cpu_.seed();
  if (device_twin_.defined()) device_twin_.set_current_seed(s);
  return s;
}

// The state is the CPU generator's state followed by the device twin's (if any).
void FlagosGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  size_t twin_bytes = device_twin_.defined() ? device_twin_.get_state().nbytes() : 0;
  TORCH_CHECK(new_state.numel() == int64_t(cpu_state_bytes_ + twin_bytes) &&
                  new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
              "flagos: an RNG state of this device is ", cpu_state_bytes_ + twin_bytes,
              " bytes (torch.uint8); got ", new_state.numel(), " elements");
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  auto part = [&](size_t offset, size_t n) {
    auto t = at::empty({int64_t(n)}, at::kByte);
    std::memcpy(t.data_ptr(), bytes + offset, n);
    return t;
  };
  cpu_.set_state(part(0, cpu_state_bytes_));
  if (twin_bytes) device_twin_.set_state(part(cpu_state_bytes_, twin_bytes));
}

c10::intrusive_ptr<c10::TensorImpl> FlagosGeneratorImpl::get_state() const {
  if (!device_twin_.defined()) return cpu_.unsafeGetGeneratorImpl()->get_state();
  return at::cat({cpu_.get_state(), device_twin_.get_state()}).unsafeReleaseIntrusivePtr();
}

FlagosGeneratorImpl* FlagosGeneratorImpl::clone_impl() const {
  auto* gen = new FlagosGeneratorImpl(device().index());
  gen->cpu_ = cpu_.clone();
  if (device_twin_.defined()) gen->device_twin_ = device_twin_.clone();
  return gen;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::array<at::Generator, 64> gens;
  static std::array<std::once_flag, 64> once;
  if (device < 0) device = current_device();
  hal_device(device);
  std::call_once(once[device], [device] {
    gens[device] = at::make_generator<FlagosGeneratorImpl>(device, c10::default_rng_seed_val,
                                                           /*is_default=*/true);
    gens[device].set_current_seed(c10::default_rng_seed_val);
  });
  return gens[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  return at::make_generator<FlagosGeneratorImpl>(device);
}

}  // namespace flagos
