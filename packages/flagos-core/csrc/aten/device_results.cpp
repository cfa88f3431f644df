#include "aten/device_results.h"

#include <cstdlib>
#include <string>

#include "aten/result_adoption.h"
#include "runtime/allocator.h"

namespace flagos {

#ifdef FLAGOS_CUDA_RESULTS
bool install_cuda_results_allocator();  // csrc_cuda/cuda_results_allocator.cpp
#endif

namespace {
thread_local DeviceResultsScope t_scope;
}  // namespace

bool install_device_results_allocator() {
#ifdef FLAGOS_CUDA_RESULTS
  static const bool installed = [] {
    // FLAGOS_DEVICE_RESULTS=0: leave torch's CUDA allocator alone (results are copied).
    const char* env = std::getenv("FLAGOS_DEVICE_RESULTS");
    if (env && std::string(env) == "0") return false;
    return install_cuda_results_allocator();
  }();
  return installed;
#else
  return false;
#endif
}

DeviceResultsOnFlagos::DeviceResultsOnFlagos(c10::DeviceIndex device, c10::DeviceIndex twin,
                                             c10::StreamId stream)
    : previous_device_(t_scope.device), previous_twin_(t_scope.twin),
      previous_stream_(t_scope.stream) {
  t_scope = DeviceResultsScope{device, twin, stream};
}

DeviceResultsOnFlagos::~DeviceResultsOnFlagos() {
  t_scope = DeviceResultsScope{previous_device_, previous_twin_, previous_stream_};
}

const DeviceResultsScope* active_device_results() {
  const DeviceResultsScope& scope = t_scope;
  return scope.device >= 0 ? &scope : nullptr;
}

c10::DataPtr allocate_device_result(const DeviceResultsScope& scope, size_t n,
                                    bool may_free_cached) {
  c10::DataPtr flagos = may_free_cached ? allocate_on_device(scope.device, n)
                                        : try_allocate_on_device(scope.device, n);
  if (!flagos) return c10::DataPtr();
  // The same block, context and deleter, seen as memory of the CUDA device: the kernel's
  // tensor is a CUDA tensor, and freeing it (a temporary) frees the flagos block.
  void* ptr = flagos.get();
  c10::DeleterFnPtr deleter = flagos.get_deleter();
  void* ctx = flagos.release_context();
  return c10::DataPtr(ptr, ctx, deleter, c10::Device(c10::DeviceType::CUDA, scope.twin));
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
