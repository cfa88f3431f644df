// The CUDA HAL: streams and events. A stream is a non-blocking CUstream (as PyTorch's own
// streams); the default stream of a device is the legacy NULL stream (CUstream 0) of its
// primary context, PyTorch's default CUDA stream. An event is one CUevent per device,
// created in that device's context on the first record there.
#include "cuda.hpp"

namespace flagos_cuda {
namespace {

// NOT_READY is an answer, not a failure: no error message for it.
Status query_result(CUresult r, const char* fn) {
  if (r == CUDA_ERROR_NOT_READY) return FLAGOS_ERROR_NOT_READY;
  return r == CUDA_SUCCESS ? FLAGOS_SUCCESS : cu_fail(r, fn);
}

}  // namespace

// ---- streams -------------------------------------------------------------------------
Status Cuda::priority_range(int* least, int* greatest) {
  CU_CALL(cuCtxGetStreamPriorityRange, least, greatest);
  return FLAGOS_SUCCESS;
}

Status Cuda::stream_create(Stream& s) {
  if (s.is_default) return FLAGOS_SUCCESS;  // CUstream 0 of the device's primary context
  CU_CALL(cuStreamCreateWithPriority, &s.cu, CU_STREAM_NON_BLOCKING, s.priority);
  return FLAGOS_SUCCESS;
}

// The driver releases the stream once its queued work has finished.
Status Cuda::stream_destroy(Stream& s) {
  CU_CALL(cuStreamDestroy_v2, s.cu);
  return FLAGOS_SUCCESS;
}

Status Cuda::stream_query(Stream& s) { return query_result(driver.cuStreamQuery(s.cu), "cuStreamQuery"); }

Status Cuda::stream_synchronize(Stream& s) {
  CU_CALL(cuStreamSynchronize, s.cu);
  return FLAGOS_SUCCESS;
}

// The event may belong to another device's context: the driver allows that.
Status Cuda::stream_wait_event(Stream& s, Event& e) {
  CU_CALL(cuStreamWaitEvent, s.cu, e.last(), 0u);
  return FLAGOS_SUCCESS;
}

void* Cuda::stream_native_handle(Stream& s) { return s.cu; }  // a cudaStream_t; 0 = legacy default

// ---- events --------------------------------------------------------------------------
Status Cuda::event_create(Event& e) {
  int n = Kit::device_count();
  e.per_device.reset(new std::atomic<CUevent>[n]);
  for (int i = 0; i < n; ++i) e.per_device[i].store(nullptr);
  return FLAGOS_SUCCESS;
}

// Safe while the event is still pending: the driver frees it once it completes.
Status Cuda::event_destroy(Event& e) {
  CUresult first_error = CUDA_SUCCESS;
  for (int i = 0; i < Kit::device_count(); ++i) {
    CUevent ce = e.per_device[i].exchange(nullptr);
    if (!ce || activate(i) != FLAGOS_SUCCESS) continue;
    CUresult r = driver.cuEventDestroy_v2(ce);
    if (first_error == CUDA_SUCCESS) first_error = r;
  }
  return first_error == CUDA_SUCCESS ? FLAGOS_SUCCESS : cu_fail(first_error, "cuEventDestroy_v2");
}

Status Cuda::event_record(Event& e, Stream& s) {
  std::atomic<CUevent>& slot = e.per_device[s.device];
  CUevent ce = slot.load(std::memory_order_acquire);
  if (!ce) {
    std::lock_guard<std::mutex> lock(e.create_mu);
    if (!(ce = slot.load(std::memory_order_acquire))) {
      unsigned flags = (e.flags & FLAGOS_EVENT_DISABLE_TIMING ? CU_EVENT_DISABLE_TIMING : 0u) |
                       (e.flags & FLAGOS_EVENT_BLOCKING_SYNC ? CU_EVENT_BLOCKING_SYNC : 0u);
      CU_CALL(cuEventCreate, &ce, flags);
      slot.store(ce, std::memory_order_release);
    }
  }
  CU_CALL(cuEventRecord, ce, s.cu);
  return FLAGOS_SUCCESS;
}

Status Cuda::event_query(Event& e) { return query_result(driver.cuEventQuery(e.last()), "cuEventQuery"); }

Status Cuda::event_synchronize(Event& e) {
  CU_CALL(cuEventSynchronize, e.last());
  return FLAGOS_SUCCESS;
}

Status Cuda::event_elapsed_time(float* ms, Event& start, Event& end) {
  int sd = start.device.load(), ed = end.device.load();
  if (sd != ed) {
    return kit::fail(FLAGOS_ERROR_INVALID_VALUE,
                     "event_elapsed_time: events were recorded on different devices (%d and %d)", sd, ed);
  }
  return query_result(driver.cuEventElapsedTime(ms, start.last(), end.last()), "cuEventElapsedTime");
}

}  // namespace flagos_cuda
