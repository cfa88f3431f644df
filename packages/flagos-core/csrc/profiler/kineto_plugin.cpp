// flagos device activity in torch.profiler: a Kineto activity profiler registered through
// torch's PrivateUse1 profiler registry (torch/csrc/profiler/standalone/
// privateuse1_profiler.h, in torch releases that have it). A session that asks for
// device activity (ProfilerActivity.PrivateUse1) records HAL-timed spans of routed ops,
// copies and memsets (runtime/device_activity.h); each span is linked to the CPU op that
// issued it by the correlation id torch's profiler pushed for that op, so key_averages()
// gives every op its device time and the Chrome trace draws flow arrows to the device
// rows (one row per flagos stream).
#include "profiler/kineto_plugin.h"

// USE_KINETO is defined for this file alone (CMakeLists.txt), where torch's Kineto headers
// exist.
#if defined(USE_KINETO) && \
    __has_include(<torch/csrc/profiler/standalone/privateuse1_profiler.h>) && \
    __has_include(<libkineto.h>)

#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "runtime/device_activity.h"
#include "runtime/hal.h"

namespace flagos {
namespace {

using libkineto::ActivityType;

const std::set<ActivityType>& device_activity_types() {
  static const std::set<ActivityType> types{ActivityType::CONCURRENT_KERNEL,
                                            ActivityType::GPU_MEMCPY, ActivityType::GPU_MEMSET};
  return types;
}

ActivityType activity_type(device_activity::Kind kind) {
  switch (kind) {
    case device_activity::Kind::Memcpy:
      return ActivityType::GPU_MEMCPY;
    case device_activity::Kind::Memset:
      return ActivityType::GPU_MEMSET;
    case device_activity::Kind::Op:
      break;
  }
  return ActivityType::CONCURRENT_KERNEL;
}

class Session : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    status_ = libkineto::TraceStatus::RECORDING;
    if (!device_activity::start()) errors_.push_back("flagos: no usable device to record on");
  }

  void stop() override {
    spans_ = device_activity::stop();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0,
                 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_activity, int64_t,
                    int64_t) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    for (const auto& s : spans_) {
      // "aten::mm [boxing]": the op as the provider ran it, apart from the CPU op's row in
      // key_averages() (as a CUDA kernel's name is apart from its op's).
      buffer_->emplace_activity(buffer_->span, activity_type(s.kind),
                                s.provider.empty() ? s.name : s.name + " [" + s.provider + "]");
      auto& a = *buffer_->activities.back();
      a.startTime = s.start_ns;
      a.endTime = s.end_ns;
      a.device = s.device;
      a.resource = static_cast<int32_t>(s.stream);
      a.id = static_cast<int32_t>(s.correlation);
      if (s.correlation != 0) {
        a.linked = linked_activity(static_cast<int32_t>(s.correlation));
        a.flow.id = static_cast<uint32_t>(s.correlation);
        a.flow.type = libkineto::kLinkAsyncCpuGpu;
        a.flow.start = false;
      }
      a.addMetadata("device", s.device);
      a.addMetadata("stream", s.stream);
      a.addMetadata("correlation", s.correlation);
      if (!s.provider.empty()) a.addMetadataQuoted("provider", s.provider);
      if (s.bytes != 0) a.addMetadata("bytes", s.bytes);
      // (the logger's own entry, not GenericTraceActivity::log: that one is compiled into
      // libtorch, which need not export it)
      logger.handleGenericActivity(a);
    }
    spans_.clear();
    status_ = libkineto::TraceStatus::READY;
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override { return nullptr; }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }

  // Kineto keeps the buffer, and with it the activities the logger points to.
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

  void pushCorrelationId(uint64_t id) override { device_activity::push_correlation(id); }
  void popCorrelationId() override { device_activity::pop_correlation(); }

 private:
  std::vector<device_activity::Span> spans_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::vector<std::string> errors_;
};

class DeviceActivityProfiler : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override {
    return device_activity_types();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& activity_types, const libkineto::Config&) override {
    for (auto t : activity_types) {
      if (device_activity_types().count(t)) return std::make_unique<Session>();
    }
    return nullptr;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"flagos"};
};

REGISTER_PRIVATEUSE1_PROFILER(DeviceActivityProfiler);

}  // namespace

bool kineto_plugin_available() { return true; }

}  // namespace flagos

#else

namespace flagos {
bool kineto_plugin_available() { return false; }
}  // namespace flagos

#endif
