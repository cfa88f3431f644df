// PrivateUse1 hooks: availability, device count, generators, pinned memory, pointers,
// storage resize, and fork safety.
#include <ATen/Context.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <pthread.h>

#include <atomic>

#include "runtime/generator.h"
#include "runtime/hal.h"
#include "runtime/host_allocator.h"
#include "runtime/resize.h"
#include "runtime/twin.h"

namespace flagos {
namespace {

std::atomic<bool> g_in_forked_child{false};

struct FlagosHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return hals_initialized() && device_count() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return new_generator(device);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    auto device = device_of_pointer(data);
    TORCH_CHECK(device, "flagos: pointer ", data, " is not flagos device memory");
    return at::Device(c10::DeviceType::PrivateUse1, *device);
  }
  // With a device twin in the process, at::empty(pin_memory=True) may take the twin's
  // pinned allocator (torch asks the CUDA hooks before PrivateUse1's); that memory is
  // page-locked for the flagos devices on that twin too.
  bool isPinnedPtr(const void* data) const override {
    if (is_pinned_ptr(data)) return true;
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      auto twin = device_twin(d);
      if (twin && at::globalContext().getAcceleratorHooksInterface(twin->type()).isPinnedPtr(data))
        return true;
    }
    return false;
  }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_host_allocator(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void init() const override {
    TORCH_CHECK(!g_in_forked_child.load(),
                "flagos: cannot re-initialize flagos in a forked subprocess. To use flagos with "
                "multiprocessing, use the 'spawn' start method");
  }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto prev = current_device();
    if (device != prev) set_current_device(device);
    return prev;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
};

void mark_forked_child() {
  g_in_forked_child.store(true);
  disable_devices_after_fork();
}

}  // namespace

bool in_forked_child() { return g_in_forked_child.load(std::memory_order_relaxed); }

void register_hooks() {
  static FlagosHooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
  static bool atfork = [] {
    pthread_atfork(nullptr, nullptr, &mark_forked_child);
    return true;
  }();
  (void)atfork;
}

}  // namespace flagos
