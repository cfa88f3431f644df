#include "engines/twin/device_results.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "aten/result_adoption.h"
#include "runtime/allocator.h"

namespace flagos {

namespace {
thread_local DeviceResultsScope t_scope;

struct TwinResults {
  std::atomic<DeviceResultsInstaller> install{nullptr};
  std::once_flag once;
  bool on = false;
};
constexpr size_t kDeviceTypes = static_cast<size_t>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES);
// Leaked: installers register from static initializers, which may run before this file's.
std::array<TwinResults, kDeviceTypes>& twin_results() {
  static auto* table = new std::array<TwinResults, kDeviceTypes>();
  return *table;
}
}  // namespace

bool register_device_results_installer(c10::DeviceType twin, DeviceResultsInstaller install) {
  twin_results()[static_cast<size_t>(twin)].install.store(install);
  return true;
}

bool device_results_on(c10::DeviceType twin) {
  TwinResults& t = twin_results()[static_cast<size_t>(twin)];
  std::call_once(t.once, [&t] {
    // FLAGOS_DEVICE_RESULTS=0: leave the twin's allocator alone (results are copied).
    const char* env = std::getenv("FLAGOS_DEVICE_RESULTS");
    DeviceResultsInstaller install = t.install.load();
    t.on = install && !(env && std::string(env) == "0") && install();
  });
  return t.on;
}

DeviceResultsOnFlagos::DeviceResultsOnFlagos(const DeviceResultsScope& scope)
    : previous_(t_scope) {
  t_scope = scope;
}

DeviceResultsOnFlagos::~DeviceResultsOnFlagos() { t_scope = previous_; }

const DeviceResultsScope* active_device_results() {
  const DeviceResultsScope& scope = t_scope;
  return scope.device >= 0 ? &scope : nullptr;
}

c10::DataPtr allocate_device_result(const DeviceResultsScope& scope, size_t n,
                                    bool may_free_cached) {
  c10::DataPtr flagos = may_free_cached ? allocate_on_device(scope.device, n)
                                        : try_allocate_on_device(scope.device, n);
  if (!flagos) return c10::DataPtr();
  // The same block, context and deleter, seen as memory of the twin device: the kernel's
  // tensor is a twin tensor, and freeing it (a temporary) frees the flagos block.
  void* ptr = flagos.get();
  c10::DeleterFnPtr deleter = flagos.get_deleter();
  void* ctx = flagos.release_context();
  return c10::DataPtr(ptr, ctx, deleter, scope.twin);
}

std::optional<at::Tensor> adopt_device_result(const at::Tensor& t, c10::DeviceIndex device) {
  if (!result_is_adoptable(t)) return std::nullopt;
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  if (!is_flagos_data_ptr(impl->data_ptr())) return std::nullopt;
  // The same DataPtr, tagged with the flagos device again: the storage is flagos storage.
  impl->mutable_data_ptr().unsafe_set_device(c10::Device(c10::DeviceType::PrivateUse1, device));
  become_flagos_tensor(t, device);
  return t;
}

}  // namespace flagos
