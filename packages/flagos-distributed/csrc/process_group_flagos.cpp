#include "process_group_flagos.h"

#include <ATen/ops/from_blob.h>
#include <ATen/core/ivalue.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/version.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <mutex>
#include <sstream>

namespace flagos_dist {

using c10d::OpType;
using c10d::Work;
using WorkPtr = c10::intrusive_ptr<Work>;
// The PREMUL_SUM payload type: named NCCLPreMulSumSupplement up to torch 2.12 and an alias
// of PreMulSumSupplement after, so the old name compiles on every supported release.
using PreMulSumSupplement = c10d::NCCLPreMulSumSupplement;
// OpType::REDUCE_SCATTER_TENSOR_COALESCED appeared after torch 2.11 (checked: 2.11 lacks it,
// 2.13 has it); older releases file the op under COALESCED.
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13
constexpr OpType kReduceScatterTensorCoalesced = OpType::COALESCED;
#else
constexpr OpType kReduceScatterTensorCoalesced = OpType::REDUCE_SCATTER_TENSOR_COALESCED;
#endif
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr auto kFlagos = c10::DeviceType::PrivateUse1;

const c10::impl::DeviceGuardImplInterface* flagosImpl() {
  return c10::impl::getDeviceGuardImpl(kFlagos);
}

std::string messageOf(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& err) {
    return err.what_without_backtrace();
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "unknown error";
  }
}

bool looksLikePeerFailure(const std::string& what) {
  for (const char* s : {"imed out", "imeout", "onnection closed", "onnection reset",
                        "roken pipe", "closed by peer", "onnection refused", "EOF"}) {
    if (what.find(s) != std::string::npos) return true;
  }
  return false;
}

std::exception_ptr distError(const std::string& msg) {
  try {
    C10_THROW_ERROR(DistBackendError, msg);
  } catch (...) {
    return std::current_exception();
  }
}

// FLAGOS_DIST_TRACE=1: one line on stderr per step of the delegation (flushed), so that a
// crash inside a delegate shows the last step that was reached.
bool tracing() {
  static const bool on = [] {
    const char* v = std::getenv("FLAGOS_DIST_TRACE");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

template <typename... Args>
void trace(const Args&... args) {
  if (!tracing()) return;
  const std::string line = c10::str("[flagos-dist pid ", ::getpid(), "] ", args..., "\n");
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

// A failure of the delegate, restated with the collective, the rank and the timeout.
std::exception_ptr wrapError(const std::string& prefix, milliseconds timeout,
                             const std::exception_ptr& e) {
  const std::string what = messageOf(e);
  if (what.rfind("ProcessGroupFlagOS", 0) == 0) return e;  // already ours
  std::string msg = c10::str(prefix, " failed: ", what);
  if (looksLikePeerFailure(what)) {
    msg += c10::str("\nProcessGroupFlagOS: a peer rank died, hung, or did not reach this ",
                    "collective within the timeout (", timeout.count(), " ms).");
  }
  return distError(msg);
}

// Makes the current CUDA stream of `cuda_index` the native stream of the current flagos
// stream of `flagos_index` for the lifetime of the object, so that ProcessGroupNCCL
// orders its work after (and its wait() before) the flagos work on that stream. No CUDA
// library is linked: the CUDA DeviceGuardImpl is found at run time (CUDA builds of torch
// register it), and an external cudaStream_t is a c10 CUDA stream whose id is the
// pointer itself (what c10::cuda::getStreamFromExternal / torch.cuda.ExternalStream do).
class CudaStreamSwap {
 public:
  CudaStreamSwap(c10::DeviceIndex flagos_index, int cuda_index) {
    // Checked before anything is touched: a missing CUDA guard or an out-of-range
    // ordinal is an error here, not a crash inside ProcessGroupNCCL.
    TORCH_CHECK(c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA),
                "ProcessGroupFlagOS: the NCCL path needs a CUDA build of torch");
    cuda_ = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    TORCH_CHECK(cuda_index >= 0 && cuda_index < cuda_->deviceCount(),
                "ProcessGroupFlagOS: flagos:", int(flagos_index), " maps to CUDA device ",
                cuda_index, ", but torch sees ", int(cuda_->deviceCount()), " CUDA device(s)");
    const auto* f = flagosImpl();
    void* handle = f->getStreamNativeHandle(f->getStream(c10::Device(kFlagos, flagos_index)));
    auto id = static_cast<c10::StreamId>(reinterpret_cast<intptr_t>(handle));
    if (id == 1) id = 0;  // cudaStreamLegacy is the default stream, id 0
    // c10 reads an even, non-zero id as an external cudaStream_t; anything else would be
    // decoded as a pool stream index and dereferenced.
    TORCH_CHECK(id == 0 || id == 2 || (id & 1) == 0,
                "ProcessGroupFlagOS: the native handle of the current stream of flagos:",
                int(flagos_index), " (", handle, ") is not a cudaStream_t");
    trace("stream swap: flagos:", int(flagos_index), " stream ", handle, " -> cuda:", cuda_index);
    prev_ = cuda_->exchangeStream(
        c10::Stream(c10::Stream::UNSAFE,
                    c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(cuda_index)),
                    id));
  }
  ~CudaStreamSwap() { cuda_->exchangeStream(*prev_); }
  CudaStreamSwap(const CudaStreamSwap&) = delete;
  CudaStreamSwap& operator=(const CudaStreamSwap&) = delete;

 private:
  const c10::impl::DeviceGuardImplInterface* cuda_ = nullptr;
  std::optional<c10::Stream> prev_;
};

uint64_t mix(uint64_t h, int64_t v) {
  h ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

uint64_t shapesHash(const std::vector<at::Tensor>& ts, uint64_t h = 1469598103934665603ULL) {
  for (const auto& t : ts) {
    h = mix(h, static_cast<int64_t>(t.scalar_type()));
    h = mix(h, t.dim());
    for (auto s : t.sizes()) h = mix(h, s);
  }
  return h;
}

// [0] op [1] reduce op [2] root [3] tensor count [4] dtype [5] ndim [6..13] dims
// [14] hash of every tensor's dtype and shape [15] total elements
Fingerprint fingerprint(OpType op, int64_t redop, int64_t root, std::optional<at::ScalarType> dtype,
                        c10::IntArrayRef shape, int64_t count, uint64_t hash, int64_t numel) {
  Fingerprint f;
  f.fill(-1);
  f[0] = static_cast<int64_t>(op);
  f[1] = redop;
  f[2] = root;
  f[3] = count;
  if (dtype) f[4] = static_cast<int64_t>(*dtype);
  f[5] = static_cast<int64_t>(shape.size());
  for (size_t i = 0; i < shape.size() && i < 8; ++i) f[6 + i] = shape[i];
  f[14] = static_cast<int64_t>(hash);
  f[15] = numel;
  return f;
}

// Fingerprint of a list of tensors that must agree across ranks.
Fingerprint fingerprintOf(OpType op, const std::vector<at::Tensor>& ts, int64_t redop = -1,
                          int64_t root = -1, uint64_t extra = 0) {
  int64_t numel = 0;
  for (const auto& t : ts) numel += t.numel();
  if (ts.empty()) return fingerprint(op, redop, root, std::nullopt, {}, 0, shapesHash(ts, extra), 0);
  return fingerprint(op, redop, root, ts[0].scalar_type(), ts[0].sizes(),
                     static_cast<int64_t>(ts.size()), shapesHash(ts, 1469598103934665603ULL ^ extra),
                     numel);
}

const char* redopName(int64_t op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "?";
  }
}

std::string describe(const Fingerprint& f) {
  std::ostringstream os;
  os << c10d::opTypeToString(static_cast<OpType>(f[0]));
  if (f[4] >= 0) {
    os << " " << c10::toString(static_cast<at::ScalarType>(f[4])) << "[";
    for (int64_t i = 0; i < f[5] && i < 8; ++i) os << (i ? ", " : "") << f[6 + i];
    if (f[5] > 8) os << ", ...";
    os << "]";
  }
  if (f[3] > 1) os << " (first of " << f[3] << " tensors)";
  if (f[1] >= 0) os << " op=" << redopName(f[1]);
  if (f[2] >= 0) os << " root=" << f[2];
  if (f[15] >= 0) os << " numel=" << f[15];
  return os.str();
}

}  // namespace

// ---------------------------------------------------------------------------------------
// FlagosWork: the Work handed back for every collective. It owns the flagos tensors until
// the delegate's work is done, runs the host-side completion steps (AVG division, staged
// copies back), completes a future whose value is the flagos tensors, and turns a stuck or
// failed collective into a DistBackendError naming the collective, the rank and the timeout.
class FlagosWork : public Work {
 public:
  FlagosWork(int rank, int world, Plan plan, std::string prefix, Path path,
             std::vector<WorkPtr> inner, int cuda_index)
      : Work(rank, plan.op),
        world_(world),
        plan_(std::move(plan)),
        prefix_(std::move(prefix)),
        path_(path),
        inner_(std::move(inner)),
        cuda_index_(cuda_index),
        start_(Clock::now()) {
    std::vector<c10::Device> devices;
    if (path_ == Path::kCuda && plan_.device) devices.emplace_back(kFlagos, *plan_.device);
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()), devices);
  }

  // Hooks the delegate's futures; separate from the constructor because the callbacks hold
  // a reference to this work (dropped once they have run).
  //
  // A delegate may hand back no work at all (ProcessGroupNCCL since torch 2.8 returns
  // nullptr for async_op=False collectives and coalesced groups: the kernel is already
  // on the current stream) or a work without a future (getFuture() throws, as Gloo's
  // send/recv, or returns null, as ProcessGroupNCCL's coalesced works, whose future_ is
  // never set). Calling addCallback on that null future was a segfault.
  void start() {
    std::vector<c10::intrusive_ptr<c10::ivalue::Future>> futures;
    bool no_future = false;
    for (auto& w : inner_) {
      if (!w) continue;
      c10::intrusive_ptr<c10::ivalue::Future> f;
      try {
        f = w->getFuture();
      } catch (const std::exception&) {
      }
      if (f) {
        futures.push_back(std::move(f));
      } else {
        no_future = true;
      }
    }
    trace(prefix_, ": ", inner_.size(), " delegate work(s), ", futures.size(), " future(s)",
          no_future ? ", some without a future" : "");
    if (no_future) {
      if (path_ == Path::kCuda) {
        // CUDA works complete on the GPU: order a flagos side stream after them now.
        completeCuda();
        return;
      }
      lazy_ = true;  // host paths: completed by wait()
      return;
    }
    pending_ = futures.size();
    if (pending_ == 0) {
      finalize();
      return;
    }
    auto self = c10::intrusive_ptr<FlagosWork>::reclaim_copy(this);
    for (auto& f : futures) {
      f->addCallback([self](c10::ivalue::Future& done) { self->onInnerDone(done); });
    }
  }

  bool isCompleted() override {
    if (lazy_ || path_ == Path::kCuda) {
      for (auto& w : inner_)
        if (w && !w->isCompleted()) return false;
      if (lazy_) {
        for (auto& w : inner_)
          if (w && !w->isSuccess()) return true;
        complete();
      }
      return true;
    }
    return Work::isCompleted();
  }

  bool wait(milliseconds timeout) override {
    if (lazy_) {
      try {
        for (auto& w : inner_)
          if (w) w->wait(timeout);
      } catch (...) {
        auto e = wrapError(prefix_, plan_.timeout, std::current_exception());
        fail(e);
        std::rethrow_exception(e);
      }
      complete();
    } else if (path_ == Path::kCuda) {
      try {
        std::optional<CudaStreamSwap> swap;
        if (plan_.device) swap.emplace(*plan_.device, cuda_index_);
        for (auto& w : inner_)
          if (w) w->wait(timeout);
      } catch (...) {
        std::rethrow_exception(wrapError(prefix_, plan_.timeout, std::current_exception()));
      }
      return true;
    }
    const auto limit = timeout != kNoTimeout ? Clock::now() + timeout : deadline();
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_until(lock, limit, [this] { return completed_; })) {
      lock.unlock();
      const auto waited =
          std::chrono::duration_cast<milliseconds>(Clock::now() - start_).count();
      auto e = distError(c10::str(
          prefix_, " timed out after ", waited, " ms: a peer rank died, hung, or did not ",
          "reach this collective (", timeout != kNoTimeout ? "wait() timeout" : "group timeout",
          ")."));
      fail(e);
      std::rethrow_exception(e);
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  void synchronize() override {
    if (path_ == Path::kCuda) {
      std::optional<CudaStreamSwap> swap;
      if (plan_.device) swap.emplace(*plan_.device, cuda_index_);
      for (auto& w : inner_)
        if (w) w->synchronize();
    }
  }

  void abort() override {
    for (auto& w : inner_)
      if (w) w->abort();
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    TORCH_CHECK(!lazy_, prefix_, ": this delegate gives no future for this operation; "
                "use wait()");
    return future_;
  }

  std::vector<at::Tensor> result() override { return plan_.result; }
  uint64_t getSequencenumber() const override { return plan_.seq; }

 private:
  Clock::time_point deadline() const {
    // The delegate enforces the timeout itself and reports a precise error; this bound
    // only catches a delegate that never reports (a grace period later).
    const auto grace = milliseconds(std::max<int64_t>(2000, plan_.timeout.count() / 10));
    return start_ + plan_.timeout + grace;
  }

  void onInnerDone(c10::ivalue::Future& f) {
    {
      std::lock_guard<std::mutex> g(state_);
      if (done_) return;
      if (f.hasError()) {
        done_ = true;
      } else if (--pending_ > 0) {
        return;
      }
    }
    if (f.hasError()) {
      fail(wrapError(prefix_, plan_.timeout, f.exception_ptr()));
      return;
    }
    if (path_ == Path::kCuda) {
      completeCuda();
    } else {
      finalize();
    }
  }

  // Host paths: the delegate is done and the data is in host-visible memory.
  void finalize() {
    try {
      for (auto& t : plan_.divide) {
        if (at::isIntegralType(t.scalar_type(), /*includeBool=*/true)) {
          t.div_(world_, "trunc");
        } else {
          t.div_(world_);
        }
      }
      for (auto& [dst, src] : plan_.post_copy) dst.copy_(src);
      for (auto& [dst, src] : plan_.copy_back) dst.copy_(src);
    } catch (...) {
      fail(wrapError(prefix_, plan_.timeout, std::current_exception()));
      return;
    }
    future_->markCompleted(c10::IValue(plan_.result));
    finish();
  }

  // CUDA path: the future completes with its events recorded on a flagos side stream that
  // waits for NCCL, so consumers that wait on the future are ordered after the collective
  // without making the caller's stream wait at launch.
  void completeCuda() {
    try {
      if (plan_.device) {
        const auto* impl = flagosImpl();
        const c10::Device dev(kFlagos, *plan_.device);
        const c10::Stream side = impl->getStreamFromGlobalPool(dev, false);
        const c10::Stream prev = impl->exchangeStream(side);
        try {
          {
            CudaStreamSwap swap(*plan_.device, cuda_index_);
            for (auto& w : inner_)
              if (w) w->synchronize();
          }
          future_->markCompleted(c10::IValue(plan_.result));
        } catch (...) {
          impl->exchangeStream(prev);
          throw;
        }
        impl->exchangeStream(prev);
      } else {
        future_->markCompleted(c10::IValue(plan_.result));
      }
    } catch (...) {
      fail(wrapError(prefix_, plan_.timeout, std::current_exception()));
      return;
    }
    finish();
  }

  void complete() {
    {
      std::lock_guard<std::mutex> g(state_);
      if (done_) return;
      done_ = true;
    }
    finalize();
  }

  void fail(const std::exception_ptr& e) {
    {
      std::lock_guard<std::mutex> g(state_);
      done_ = true;
    }
    future_->setErrorIfNeeded(e);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!completed_) {
      completed_ = true;
      exception_ = e;
      cv_.notify_all();
    }
  }

  const int world_;
  Plan plan_;
  const std::string prefix_;
  const Path path_;
  std::vector<WorkPtr> inner_;
  const int cuda_index_;
  const Clock::time_point start_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::mutex state_;
  size_t pending_ = 0;
  bool done_ = false;
  bool lazy_ = false;
};

// ---------------------------------------------------------------------------------------

ProcessGroupFlagOS::ProcessGroupFlagOS(int rank, int size, c10::intrusive_ptr<c10d::Backend> inner,
                                       c10::intrusive_ptr<c10d::Backend> checker, Config config)
    : Backend(rank, size),
      inner_(std::move(inner)),
      checker_(std::move(checker)),
      config_(std::move(config)) {
  TORCH_CHECK(inner_, "ProcessGroupFlagOS: no delegate backend given");
  // The delegate must be the library named by the config: the NCCL path hands it CUDA
  // tensors on the flagos stream, which another backend would misuse.
  TORCH_CHECK(inner_->getBackendName() == config_.delegate,
              "ProcessGroupFlagOS: the delegate backend is '", inner_->getBackendName(),
              "', expected '", config_.delegate, "'");
  TORCH_CHECK(config_.path != Path::kCuda || config_.delegate == "nccl",
              "ProcessGroupFlagOS: the cuda path needs the nccl delegate, not ",
              config_.delegate);
  if (config_.path == Path::kCuda) {
    TORCH_CHECK(c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA),
                "ProcessGroupFlagOS: the NCCL path needs a CUDA build of torch");
    TORCH_CHECK(!config_.native_index.empty(),
                "ProcessGroupFlagOS: the NCCL path needs the CUDA ordinal of each flagos device");
  }
  if (checker_) {
    TORCH_CHECK(checker_->getBackendName() == "gloo",
                "ProcessGroupFlagOS: the metadata checker must be a Gloo backend, got '",
                checker_->getBackendName(), "'");
  }
  init();
}

ProcessGroupFlagOS::~ProcessGroupFlagOS() = default;

void ProcessGroupFlagOS::shutdown() {
  if (inner_) inner_->shutdown();
  if (checker_ && checker_ != inner_) checker_->shutdown();
}

void ProcessGroupFlagOS::abort() {
  if (inner_) inner_->abort();
  if (checker_ && checker_ != inner_) checker_->abort();
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupFlagOS::getBackendOptions() {
  return c10::make_intrusive<Options>("flagos", config_.timeout);
}

void ProcessGroupFlagOS::setTimeout(milliseconds timeout) {
  config_.timeout = timeout;
  inner_->setTimeout(timeout);
  if (checker_ && checker_ != inner_) checker_->setTimeout(timeout);
}

Plan ProcessGroupFlagOS::plan(OpType op, const char* name, milliseconds timeout) {
  Plan p;
  p.op = op;
  p.name = name;
  p.seq = ++seq_;
  p.timeout = timeout == c10d::kUnsetTimeout ? config_.timeout : timeout;
  return p;
}

at::Tensor ProcessGroupFlagOS::native(const at::Tensor& t, Plan& p, bool read, bool write) {
  if (!t.defined() || t.device().type() != kFlagos) return t;
  const auto index = t.device().index();
  TORCH_CHECK(!p.device || *p.device == index, "ProcessGroupFlagOS: ", p.name,
              " got tensors on flagos:", int(*p.device), " and flagos:", int(index));
  p.device = index;
  p.keep.push_back(t);
  const auto sizes = t.sizes();
  const auto dtype = at::TensorOptions().dtype(t.scalar_type());
  switch (config_.path) {
    case Path::kCuda: {
      TORCH_CHECK(index >= 0 && index < static_cast<int>(config_.native_index.size()) &&
                      config_.native_index[index] >= 0,
                  "ProcessGroupFlagOS: no CUDA ordinal known for flagos:", int(index),
                  " (its HAL memory is not CUDA memory); the NCCL path serves CUDA HAL "
                  "devices only");
      const c10::Device cuda(c10::DeviceType::CUDA,
                             static_cast<c10::DeviceIndex>(config_.native_index[index]));
      trace(p.name, " #", p.seq, ": flagos:", int(index), " ptr ", t.data_ptr(), " ",
            t.scalar_type(), t.sizes(), " -> ", cuda);
      if (t.numel() == 0) return at::empty(sizes, dtype.device(cuda));
      return at::for_blob(t.data_ptr(), sizes).strides(t.strides()).options(dtype.device(cuda))
          .target_device(cuda).make_tensor();
    }
    case Path::kHostZeroCopy: {
      if (!p.synced) {  // the delegate reads and writes the memory from the host
        const auto* impl = flagosImpl();
        impl->synchronizeStream(impl->getStream(t.device()));
        p.synced = true;
      }
      if (t.numel() == 0) return at::empty(sizes, dtype);
      return at::for_blob(t.data_ptr(), sizes).strides(t.strides()).options(dtype)
          .target_device(c10::Device(c10::kCPU)).make_tensor();
    }
    case Path::kHostStaged: {
      at::Tensor host = at::empty(sizes, dtype.pinned_memory(true));
      if (read) host.copy_(t);  // synchronous: waits for the flagos stream
      if (write) p.copy_back.emplace_back(t, host);
      return host;
    }
  }
  TORCH_INTERNAL_ASSERT(false, "unreachable");
}

std::vector<at::Tensor> ProcessGroupFlagOS::natives(const std::vector<at::Tensor>& ts, Plan& p,
                                                    bool read, bool write) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(native(t, p, read, write));
  return out;
}

std::vector<std::vector<at::Tensor>> ProcessGroupFlagOS::natives(
    const std::vector<std::vector<at::Tensor>>& ts, Plan& p, bool read, bool write) {
  std::vector<std::vector<at::Tensor>> out;
  out.reserve(ts.size());
  for (const auto& l : ts) out.push_back(natives(l, p, read, write));
  return out;
}

c10d::ReduceOp ProcessGroupFlagOS::reduceOpFor(const c10d::ReduceOp& op,
                                               std::vector<at::Tensor>& inputs,
                                               bool inputs_are_outputs,
                                               const std::vector<at::Tensor>& outputs, Plan& p,
                                               bool divide_here) {
  if (config_.path == Path::kCuda) {
    if (op.op_ == c10d::ReduceOp::PREMUL_SUM && op.supplement_) {
      auto* s = dynamic_cast<PreMulSumSupplement*>(op.supplement_.get());
      if (s && s->tensor_factor.defined() && s->tensor_factor.device().type() == kFlagos) {
        c10d::ReduceOp rop;
        rop.op_ = c10d::ReduceOp::PREMUL_SUM;
        rop.supplement_ = c10::make_intrusive<PreMulSumSupplement>(
            native(s->tensor_factor, p, true, false));
        return rop;
      }
    }
    return op;  // NCCL has AVG and PREMUL_SUM
  }
  if (op.op_ == c10d::ReduceOp::AVG) {
    if (divide_here)
      for (const auto& o : outputs) p.divide.push_back(o);
    return c10d::ReduceOp(c10d::ReduceOp::SUM);
  }
  if (op.op_ == c10d::ReduceOp::PREMUL_SUM) {
    auto* s = op.supplement_ ? dynamic_cast<PreMulSumSupplement*>(op.supplement_.get())
                             : nullptr;
    TORCH_CHECK(s, "ProcessGroupFlagOS: PREMUL_SUM without a factor");
    at::Tensor factor = s->tensor_factor.defined()
                            ? s->tensor_factor.to(at::kCPU)
                            : at::scalar_tensor(s->double_factor, at::kDouble);
    for (auto& in : inputs) {
      if (inputs_are_outputs) {
        in.mul_(factor);
      } else {
        in = in.mul(factor).to(in.scalar_type());
      }
    }
    return c10d::ReduceOp(c10d::ReduceOp::SUM);
  }
  return op;
}

void ProcessGroupFlagOS::checkMetadata(const Plan& p, const Fingerprint& fp) {
  if (!config_.check || !checker_) return;
  ++checks_;
  at::Tensor mine = at::empty({static_cast<int64_t>(fp.size())}, at::kLong);
  std::copy(fp.begin(), fp.end(), mine.data_ptr<int64_t>());
  std::vector<std::vector<at::Tensor>> all(1);
  for (int i = 0; i < size_; ++i) all[0].push_back(at::empty_like(mine));
  std::vector<at::Tensor> in{mine};
  c10d::AllgatherOptions o;
  o.timeout = p.timeout;
  const std::string prefix = c10::str("ProcessGroupFlagOS[", config_.delegate, "] rank ", rank_,
                                      "/", size_, ": metadata check of ", p.name, " #", p.seq,
                                      " (timeout ", p.timeout.count(), " ms)");
  try {
    checker_->allgather(all, in, o)->wait();
  } catch (...) {
    std::rethrow_exception(wrapError(prefix, p.timeout, std::current_exception()));
  }
  bool same = true;
  std::vector<Fingerprint> fps(size_);
  for (int i = 0; i < size_; ++i) {
    const int64_t* d = all[0][i].data_ptr<int64_t>();
    std::copy(d, d + fp.size(), fps[i].begin());
    same = same && fps[i] == fp;
  }
  if (same) return;
  std::ostringstream os;
  os << "ProcessGroupFlagOS: ranks disagree on " << p.name << " #" << p.seq
     << " (shapes, dtypes, op or root differ; nothing was exchanged). Set "
     << "FLAGOS_DIST_CHECK=0 to skip this check.";
  for (int i = 0; i < size_; ++i) os << "\n  rank " << i << ": " << describe(fps[i]);
  TORCH_CHECK(false, os.str());
}

WorkPtr ProcessGroupFlagOS::launch(
    Plan p, const std::function<std::vector<WorkPtr>()>& fn) {
  std::vector<WorkPtr> inner;
  {
    std::optional<CudaStreamSwap> swap;
    if (config_.path == Path::kCuda && p.device) {
      swap.emplace(*p.device, config_.native_index.at(*p.device));
    }
    trace(p.name, " #", p.seq, ": calling ", config_.delegate);
    inner = fn();
    trace(p.name, " #", p.seq, ": ", config_.delegate, " returned");
  }
  if (config_.path == Path::kCuda && coalescing_) {
    // ProcessGroupNCCL groups the calls; endCoalescing() hands back the work that counts.
    for (auto& t : p.keep) coalesced_keep_.push_back(t);
    return inner.size() == 1 ? inner[0] : WorkPtr();
  }
  const int cuda_index =
      (config_.path == Path::kCuda && p.device) ? config_.native_index.at(*p.device) : -1;
  std::string prefix = c10::str("ProcessGroupFlagOS[", config_.delegate, "] rank ", rank_, "/",
                                size_, ": ", p.name, " #", p.seq, " (timeout ",
                                p.timeout.count(), " ms)");
  auto w = c10::make_intrusive<FlagosWork>(rank_, size_, std::move(p), std::move(prefix),
                                           config_.path, std::move(inner), cuda_index);
  w->start();
  if (coalescing_) coalesced_.push_back(w);
  return w;
}

// ---- collectives ----------------------------------------------------------------------

WorkPtr ProcessGroupFlagOS::broadcast(std::vector<at::Tensor>& tensors,
                                      const c10d::BroadcastOptions& opts) {
  auto p = plan(OpType::BROADCAST, "broadcast", opts.timeout);
  checkMetadata(p, fingerprintOf(OpType::BROADCAST, tensors, -1, opts.rootRank));
  auto views = natives(tensors, p, true, true);
  p.result = tensors;
  return launch(std::move(p), [&] { return std::vector<WorkPtr>{inner_->broadcast(views, opts)}; });
}

WorkPtr ProcessGroupFlagOS::allreduce(std::vector<at::Tensor>& tensors,
                                      const c10d::AllreduceOptions& opts) {
  auto p = plan(OpType::ALLREDUCE, "allreduce", opts.timeout);
  checkMetadata(p, fingerprintOf(OpType::ALLREDUCE, tensors, opts.reduceOp.op_));
  auto views = natives(tensors, p, true, true);
  auto o = opts;
  o.reduceOp = reduceOpFor(opts.reduceOp, views, true, views, p);
  p.result = tensors;
  return launch(std::move(p), [&] { return std::vector<WorkPtr>{inner_->allreduce(views, o)}; });
}

WorkPtr ProcessGroupFlagOS::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                const c10d::AllreduceCoalescedOptions& opts) {
  auto p = plan(OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", opts.timeout);
  checkMetadata(p, fingerprintOf(OpType::ALLREDUCE_COALESCED, tensors, opts.reduceOp.op_));
  auto views = natives(tensors, p, true, true);
  auto o = opts;
  o.reduceOp = reduceOpFor(opts.reduceOp, views, true, views, p);
  p.result = tensors;
  return launch(std::move(p),
                [&] { return std::vector<WorkPtr>{inner_->allreduce_coalesced(views, o)}; });
}

WorkPtr ProcessGroupFlagOS::reduce(std::vector<at::Tensor>& tensors,
                                   const c10d::ReduceOptions& opts) {
  auto p = plan(OpType::REDUCE, "reduce", opts.timeout);
  checkMetadata(p, fingerprintOf(OpType::REDUCE, tensors, opts.reduceOp.op_, opts.rootRank));
  auto views = natives(tensors, p, true, true);
  auto o = opts;
  TORCH_CHECK(config_.path == Path::kCuda || opts.reduceOp.op_ != c10d::ReduceOp::PREMUL_SUM,
              "ProcessGroupFlagOS[", config_.delegate, "]: reduce does not support PREMUL_SUM");
  o.reduceOp = reduceOpFor(opts.reduceOp, views, true, views, p, rank_ == opts.rootRank);
  p.result = tensors;
  return launch(std::move(p), [&] { return std::vector<WorkPtr>{inner_->reduce(views, o)}; });
}

WorkPtr ProcessGroupFlagOS::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                      std::vector<at::Tensor>& inputs,
                                      const c10d::AllgatherOptions& opts) {
  auto p = plan(OpType::ALLGATHER, "allgather", opts.timeout);
  checkMetadata(p, fingerprintOf(OpType::ALLGATHER, inputs));
  auto in = natives(inputs, p, true, false);
  auto out = natives(outputs, p, false, true);
  for (auto& l : outputs) p.result.insert(p.result.end(), l.begin(), l.end());
  return launch(std::move(p), [&] { return std::vector<WorkPtr>{inner_->allgather(out, in, opts)}; });
}

WorkPtr ProcessGroupFlagOS::_allgather_base(at::Tensor& output, at::Tensor& input,
                                            const c10d::AllgatherOptions& opts) {
  auto p = plan(OpType::_ALLGATHER_BASE, "allgather_into_tensor", opts.timeout);
  checkMetadata(p, fingerprintOf(OpType::_ALLGATHER_BASE, {input}));
  auto in = native(input, p, true, false);
  auto out = native(output, p, false, true);
  p.result = {output};
  return launch(std::move(p),
                [&] { return std::vector<WorkPtr>{inner_->_allgather_base(out, in, opts)}; });
}

WorkPtr ProcessGroupFlagOS::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                std::vector<at::Tensor>& inputs,
                                                const c10d::AllgatherOptions& opts) {
  auto p = plan(OpType::ALLGATHER_COALESCED, "allgather_coalesced", opts.timeout);
  checkMetadata(p, fingerprintOf(OpType::ALLGATHER_COALESCED, inputs));
  auto in = natives(inputs, p, true, false);
  auto out = natives(outputs, p, false, true);
  for (auto& l : outputs) p.result.insert(p.result.end(), l.begin(), l.end());
  return launch(std::move(p),
                [&] { return std::vector<WorkPtr>{inner_->allgather_coalesced(out, in, opts)}; });
}

WorkPtr ProcessGroupFlagOS::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  auto p = plan(OpType::COALESCED, "allgather_into_tensor_coalesced", opts.timeout);
  checkMetadata(p, fingerprintOf(OpType::COALESCED, inputs));
  auto in = natives(inputs, p, true, false);
  auto out = natives(outputs, p, false, true);
  p.result = outputs;
  return launch(std::move(p), [&] {
    return std::vector<WorkPtr>{inner_->allgather_into_tensor_coalesced(out, in, opts)};
  });
}

WorkPtr ProcessGroupFlagOS::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                   std::vector<at::Tensor>& inputs,
                                   const c10d::GatherOptions& opts) {
  auto p = plan(OpType::GATHER, "gather", opts.timeout);
  checkMetadata(p, fingerprintOf(OpType::GATHER, inputs, -1, opts.rootRank));
  auto in = natives(inputs, p, true, false);
  auto out = natives(outputs, p, false, true);
  for (auto& l : outputs) p.result.insert(p.result.end(), l.begin(), l.end());
  return launch(std::move(p), [&] { return std::vector<WorkPtr>{inner_->gather(out, in, opts)}; });
}

WorkPtr ProcessGroupFlagOS::scatter(std::vector<at::Tensor>& outputs,
                                    std::vector<std::vector<at::Tensor>>& inputs,
                                    const c10d::ScatterOptions& opts) {
  auto p = plan(OpType::SCATTER, "scatter", opts.timeout);
  checkMetadata(p, fingerprintOf(OpType::SCATTER, outputs, -1, opts.rootRank));
  auto in = natives(inputs, p, true, false);
  auto out = natives(outputs, p, false, true);
  p.result = outputs;
  return launch(std::move(p), [&] { return std::vector<WorkPtr>{inner_->scatter(out, in, opts)}; });
}

WorkPtr ProcessGroupFlagOS::reduce_scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const c10d::ReduceScatterOptions& opts) {
  auto p = plan(OpType::REDUCE_SCATTER, "reduce_scatter", opts.timeout);
  uint64_t h = 0;
  for (const auto& l : inputs) h = shapesHash(l, h);
  checkMetadata(p, fingerprintOf(OpType::REDUCE_SCATTER, outputs, opts.reduceOp.op_, -1, h));
  auto in = natives(inputs, p, true, false);
  auto out = natives(outputs, p, false, true);
  auto o = opts;
  std::vector<at::Tensor> flat;
  for (auto& l : in) flat.insert(flat.end(), l.begin(), l.end());
  o.reduceOp = reduceOpFor(opts.reduceOp, flat, false, out, p);
  size_t k = 0;
  for (auto& l : in)
    for (auto& t : l) t = flat[k++];
  p.result = outputs;
  return launch(std::move(p),
                [&] { return std::vector<WorkPtr>{inner_->reduce_scatter(out, in, o)}; });
}

WorkPtr ProcessGroupFlagOS::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::ReduceScatterOptions& opts) {
  auto p = plan(OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", opts.timeout);
  checkMetadata(p, fingerprintOf(OpType::_REDUCE_SCATTER_BASE, {input}, opts.reduceOp.op_));
  std::vector<at::Tensor> in{native(input, p, true, false)};
  auto out = native(output, p, false, true);
  auto o = opts;
  o.reduceOp = reduceOpFor(opts.reduceOp, in, false, {out}, p);
  p.result = {output};
  return launch(std::move(p), [&] {
    return std::vector<WorkPtr>{inner_->_reduce_scatter_base(out, in[0], o)};
  });
}

WorkPtr ProcessGroupFlagOS::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  auto p = plan(kReduceScatterTensorCoalesced, "reduce_scatter_tensor_coalesced",
                opts.timeout);
  checkMetadata(p, fingerprintOf(kReduceScatterTensorCoalesced, inputs,
                                 opts.reduceOp.op_));
  auto in = natives(inputs, p, true, false);
  auto out = natives(outputs, p, false, true);
  auto o = opts;
  o.reduceOp = reduceOpFor(opts.reduceOp, in, false, out, p);
  p.result = outputs;
  return launch(std::move(p), [&] {
    return std::vector<WorkPtr>{inner_->reduce_scatter_tensor_coalesced(out, in, o)};
  });
}

WorkPtr ProcessGroupFlagOS::alltoall_base(at::Tensor& output, at::Tensor& input,
                                          std::vector<int64_t>& outputSplitSizes,
                                          std::vector<int64_t>& inputSplitSizes,
                                          const c10d::AllToAllOptions& opts) {
  auto p = plan(OpType::ALLTOALL_BASE, "alltoall_base", opts.timeout);
  // Row counts may differ across ranks; the dtype and the trailing dims may not.
  const auto trailing = input.dim() > 0 ? input.sizes().slice(1) : input.sizes();
  checkMetadata(p, fingerprint(OpType::ALLTOALL_BASE, -1, -1, input.scalar_type(), trailing,
                               1, static_cast<uint64_t>(outputSplitSizes.empty()), -1));
  auto in = native(input, p, true, false);
  auto out = native(output, p, false, true);
  p.result = {output};
  return launch(std::move(p), [&] {
    return std::vector<WorkPtr>{
        inner_->alltoall_base(out, in, outputSplitSizes, inputSplitSizes, opts)};
  });
}

WorkPtr ProcessGroupFlagOS::alltoall(std::vector<at::Tensor>& outputs,
                                     std::vector<at::Tensor>& inputs,
                                     const c10d::AllToAllOptions& opts) {
  auto p = plan(OpType::ALLTOALL, "alltoall", opts.timeout);
  checkMetadata(p, fingerprint(OpType::ALLTOALL, -1, -1,
                               inputs.empty() ? std::nullopt
                                              : std::optional(inputs[0].scalar_type()),
                               {}, static_cast<int64_t>(inputs.size()), 0, -1));
  auto in = natives(inputs, p, true, false);
  auto out = natives(outputs, p, false, true);
  p.result = outputs;
  return launch(std::move(p), [&] {
    try {
      return std::vector<WorkPtr>{inner_->alltoall(out, in, opts)};
    } catch (const c10::Error& e) {
      // Backend::alltoall's default refuses; Gloo has no list all_to_all before torch 2.12.
      if (std::string(e.what_without_backtrace()).find("does not support alltoall") ==
          std::string::npos) {
        throw;
      }
    }
    return std::vector<WorkPtr>{alltoall_through_base(out, in, opts)};
  });
}

WorkPtr ProcessGroupFlagOS::alltoall_through_base(std::vector<at::Tensor>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::AllToAllOptions& opts) {
  // One alltoall_base over the flattened inputs, split by element counts, then the pieces
  // copied into the outputs once it completes.
  std::vector<int64_t> in_splits, out_splits;
  std::vector<at::Tensor> flat;
  for (const auto* list : {&inputs, &outputs}) {
    for (const auto& t : *list) {
      TORCH_CHECK(t.scalar_type() == outputs.at(0).scalar_type(),
                  "flagos: all_to_all needs one dtype for every input and output tensor; got ",
                  t.scalar_type(), " and ", outputs.at(0).scalar_type());
    }
  }
  for (const auto& t : inputs) {
    flat.push_back(t.reshape(-1));
    in_splits.push_back(t.numel());
  }
  int64_t total = 0;
  for (const auto& t : outputs) {
    out_splits.push_back(t.numel());
    total += t.numel();
  }
  at::Tensor send = at::cat(flat);
  at::Tensor recv = at::empty({total}, outputs.at(0).options());
  auto work = inner_->alltoall_base(recv, send, out_splits, in_splits, opts);
  work->wait();
  int64_t offset = 0;
  for (auto& t : outputs) {
    t.copy_(recv.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
  return work;
}

WorkPtr ProcessGroupFlagOS::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  auto p = plan(OpType::SEND, "send", c10d::kUnsetTimeout);
  auto views = natives(tensors, p, true, false);
  p.result = tensors;
  return launch(std::move(p),
                [&] { return std::vector<WorkPtr>{inner_->send(views, dstRank, tag)}; });
}

WorkPtr ProcessGroupFlagOS::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  auto p = plan(OpType::RECV, "recv", c10d::kUnsetTimeout);
  auto views = natives(tensors, p, false, true);
  p.result = tensors;
  return launch(std::move(p),
                [&] { return std::vector<WorkPtr>{inner_->recv(views, srcRank, tag)}; });
}

WorkPtr ProcessGroupFlagOS::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  auto p = plan(OpType::RECVANYSOURCE, "recv_anysource", c10d::kUnsetTimeout);
  auto views = natives(tensors, p, false, true);
  p.result = tensors;
  return launch(std::move(p),
                [&] { return std::vector<WorkPtr>{inner_->recvAnysource(views, tag)}; });
}

WorkPtr ProcessGroupFlagOS::barrier(const c10d::BarrierOptions& opts) {
  auto p = plan(OpType::BARRIER, "barrier", opts.timeout);
  checkMetadata(p, fingerprint(OpType::BARRIER, -1, -1, std::nullopt, {}, 0, 0, -1));
  auto o = opts;
  if (config_.path != Path::kCuda) {
    o.device_ids.clear();
  } else {
    // flagos -> CUDA ordinal; ProcessGroupNCCL picks its barrier device from these
    for (auto& id : o.device_ids) id = config_.native_index.at(id);
    if (o.device && o.device->type() == kFlagos) {
      const auto idx = o.device->has_index() ? o.device->index() : flagosImpl()->getDevice().index();
      o.device = c10::Device(c10::DeviceType::CUDA,
                             static_cast<c10::DeviceIndex>(config_.native_index.at(idx)));
    }
  }
  return launch(std::move(p), [&] { return std::vector<WorkPtr>{inner_->barrier(o)}; });
}

void ProcessGroupFlagOS::startCoalescing() {
  TORCH_CHECK(!coalescing_, "ProcessGroupFlagOS: startCoalescing called twice");
  coalescing_ = true;
  coalesced_.clear();
  coalesced_keep_.clear();
  if (config_.path == Path::kCuda) inner_->startCoalescing();
}

WorkPtr ProcessGroupFlagOS::endCoalescing() {
  TORCH_CHECK(coalescing_, "ProcessGroupFlagOS: endCoalescing without startCoalescing");
  coalescing_ = false;
  auto p = plan(OpType::COALESCED, "coalesced", c10d::kUnsetTimeout);
  std::vector<WorkPtr> inner;
  if (config_.path == Path::kCuda) {
    p.keep = std::move(coalesced_keep_);
    for (const auto& t : p.keep)
      if (t.device().type() == kFlagos) p.device = t.device().index();
    // launch() runs this on the flagos stream's native CUDA stream.
    return launch(std::move(p), [&] { return std::vector<WorkPtr>{inner_->endCoalescing()}; });
  } else {
    inner = std::move(coalesced_);
    for (auto& w : inner) {
      auto r = w->result();
      p.result.insert(p.result.end(), r.begin(), r.end());
    }
  }
  coalesced_.clear();
  coalesced_keep_.clear();
  return launch(std::move(p), [&] { return std::move(inner); });
}

}  // namespace flagos_dist
