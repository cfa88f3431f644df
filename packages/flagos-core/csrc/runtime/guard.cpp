// DeviceGuardImpl for PrivateUse1 (flagos): devices, streams and events on the HAL.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "runtime/hal_raise.h"
#include "runtime/stream.h"

namespace flagos {
namespace {

using c10::Device;
using c10::DeviceIndex;
using c10::Stream;

struct FlagosGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return kType; }

  Device exchangeDevice(Device d) const override {
    Device old = getDevice();
    if (old.index() != d.index()) setDevice(d);
    return old;
  }
  Device getDevice() const override { return Device(kType, current_device()); }
  void setDevice(Device d) const override {
    TORCH_CHECK(d.type() == kType, "flagos guard got a ", d.type(), " device");
    set_current_device(d.index());
  }
  void uncheckedSetDevice(Device d) const noexcept override {
    try {
      set_current_device(d.index());
    } catch (...) {
    }
  }
  // A device without an index (torch.Stream(device="flagos")) is the current device.
  static c10::DeviceIndex index_of(Device d) { return d.has_index() ? d.index() : current_device(); }
  Stream getStream(Device d) const override { return current_stream(index_of(d)); }
  Stream getDefaultStream(Device d) const override { return default_stream(index_of(d)); }
  Stream getStreamFromGlobalPool(Device d, bool high_priority) const override {
    return pool_stream(index_of(d), high_priority ? -1000 : 0);
  }
  Stream getNewStream(Device d, int priority) const override {
    return pool_stream(index_of(d), priority);
  }
  Stream exchangeStream(Stream s) const override { return exchange_stream(s); }
  void* getStreamNativeHandle(const Stream s) const override {
    void* handle = nullptr;
    const auto& hal = hal_of(s.device_index());
    FLAGOS_HAL_CHECK(hal, hal.stream_get_native_handle(hal_stream(s), &handle));
    return handle;
  }
  DeviceIndex deviceCount() const noexcept override { return device_count(); }

  void destroyEvent(void* event, const DeviceIndex) const noexcept override {
    auto* ev = static_cast<Event*>(event);
    if (!ev) return;
    if (ev->handle) hal_of(ev->device).event_destroy(ev->handle);
    delete ev;
  }

  void record(void** event, const Stream& stream, const DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "flagos: event of flagos:", int(device_index), " recorded on a stream of flagos:",
                int(stream.device_index()));
    const auto& hal = hal_of(stream.device_index());
    auto* ev = static_cast<Event*>(*event);
    if (!ev) {
      ev = new Event();
      ev->device = stream.device_index();
      // As in CUDA: BACKEND_DEFAULT is what torch.Event(enable_timing=True) asks for.
      unsigned flags = flag == c10::EventFlag::BACKEND_DEFAULT ? FLAGOS_EVENT_DEFAULT
                                                                : FLAGOS_EVENT_DISABLE_TIMING;
      flagos_status_t st = hal.event_create(flags, &ev->handle);
      if (st != FLAGOS_SUCCESS) {
        delete ev;
        FLAGOS_HAL_RAISE(hal, st, "event_create");
      }
      *event = ev;
    }
    TORCH_CHECK(ev->device == stream.device_index(), "flagos: event created on flagos:",
                int(ev->device), " cannot be recorded on flagos:", int(stream.device_index()));
    FLAGOS_HAL_CHECK(hal, hal.event_record(ev->handle, hal_stream(stream)));
  }

  void block(void* event, const Stream& stream) const override {
    auto* ev = static_cast<Event*>(event);
    if (!ev) return;  // never recorded: nothing to wait for
    const auto& hal = hal_of(stream.device_index());
    FLAGOS_HAL_CHECK(hal, hal.stream_wait_event(hal_stream(stream), ev->handle));
  }

  bool queryEvent(void* event) const override {
    auto* ev = static_cast<Event*>(event);
    if (!ev) return true;
    const auto& hal = hal_of(ev->device);
    flagos_status_t st = hal.event_query(ev->handle);
    if (st == FLAGOS_ERROR_NOT_READY) return false;
    if (st != FLAGOS_SUCCESS) FLAGOS_HAL_RAISE(hal, st, "event_query");
    return true;
  }

  void synchronizeEvent(void* event) const override {
    auto* ev = static_cast<Event*>(event);
    if (!ev) return;
    const auto& hal = hal_of(ev->device);
    FLAGOS_HAL_CHECK(hal, hal.event_synchronize(ev->handle));
  }

  double elapsedTime(void* start, void* end, const DeviceIndex) const override {
    auto* a = static_cast<Event*>(start);
    auto* b = static_cast<Event*>(end);
    TORCH_CHECK(a && b, "flagos: both events must be recorded before elapsed_time");
    TORCH_CHECK(a->device == b->device, "flagos: elapsed_time needs events of one device");
    const auto& hal = hal_of(a->device);
    float ms = 0;
    FLAGOS_HAL_CHECK(hal, hal.event_elapsed_time(&ms, a->handle, b->handle));
    return ms;
  }

  bool queryStream(const Stream& stream) const override { return query_stream(stream); }
  void synchronizeStream(const Stream& stream) const override { synchronize_stream(stream); }
  void synchronizeDevice(const DeviceIndex device_index) const override {
    synchronize_device(device_index == -1 ? current_device() : device_index);
  }
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const Stream& stream) const override;
};

}  // namespace

void record_data_ptr_on_stream(const c10::DataPtr& data_ptr, const c10::Stream& stream);

void FlagosGuardImpl::recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                                            const Stream& stream) const {
  record_data_ptr_on_stream(data_ptr, stream);
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, FlagosGuardImpl);

}  // namespace flagos
