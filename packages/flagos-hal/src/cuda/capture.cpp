// The CUDA HAL: stream capture. A capture is CUDA stream capture (thread-local mode: only
// this thread's unsafe calls invalidate it; the HAL's own run relaxed) into a CUgraph; a replay is its CUgraphExec,
// launched on any stream of the device. The kit refuses the waits on a capturing stream
// before the driver sees them (kit/capture.hpp).
#include "cuda.hpp"

namespace flagos_cuda {
namespace {

// Destroys the driver object `handle` holds and clears it (so its owner's destructor does
// not destroy it again).
template <class Handle>
Status release(Handle& handle, CUresult (*destroy)(Handle), const char* fn) {
  Handle h = handle;
  handle = nullptr;
  CUresult r = destroy(h);
  return r == CUDA_SUCCESS ? FLAGOS_SUCCESS : cu_fail(r, fn);
}

}  // namespace

RelaxedCaptureMode::RelaxedCaptureMode() : mode_(CU_STREAM_CAPTURE_MODE_RELAXED) {
  if (driver.cuThreadExchangeStreamCaptureMode &&
      driver.cuThreadExchangeStreamCaptureMode(&mode_) == CUDA_SUCCESS) swapped_ = true;
}

RelaxedCaptureMode::~RelaxedCaptureMode() {
  if (swapped_) driver.cuThreadExchangeStreamCaptureMode(&mode_);
}

CudaCapturedWork::~CudaCapturedWork() {
  RelaxedCaptureMode relaxed;
  if (graph) driver.cuGraphDestroy(graph);
}

CudaReplay::~CudaReplay() {
  RelaxedCaptureMode relaxed;
  if (exec) driver.cuGraphExecDestroy(exec);
}

Status Cuda::stream_begin_capture(Stream& s) {
  CU_CALL(cuStreamBeginCapture_v2, s.cu, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  return FLAGOS_SUCCESS;
}

Status Cuda::stream_end_capture(Stream& s, CapturedWork& work) {
  CU_CALL(cuStreamEndCapture, s.cu, &work.graph);
  return FLAGOS_SUCCESS;
}

Status Cuda::capture_instantiate(CapturedWork& work, Replay& replay) {
  RelaxedCaptureMode relaxed;
  CU_CALL(cuGraphInstantiateWithFlags, &replay.exec, work.graph, 0ull);
  return FLAGOS_SUCCESS;
}

Status Cuda::capture_destroy(CapturedWork& work) {
  RelaxedCaptureMode relaxed;
  return release(work.graph, driver.cuGraphDestroy, "cuGraphDestroy");
}

Status Cuda::replay_launch(Replay& replay, Stream& s) {
  CU_CALL(cuGraphLaunch, replay.exec, s.cu);
  return FLAGOS_SUCCESS;
}

Status Cuda::replay_destroy(Replay& replay) {
  RelaxedCaptureMode relaxed;
  return release(replay.exec, driver.cuGraphExecDestroy, "cuGraphExecDestroy");
}

}  // namespace flagos_cuda
