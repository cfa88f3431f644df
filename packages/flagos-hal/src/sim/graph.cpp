// The simulated device's graph runtime (flagos_hal.h "graph runtime"): loads plans of the
// format "flagos-sim-plan-v1" (plan.hpp), uploads their constants to device memory, and
// runs an execution as one task on the stream's worker thread, in order with the stream's
// copies, fills, kernels and event records.
#include <cstring>

#include "sim.hpp"

namespace flagos_sim {
namespace plan {
namespace {

// Reads little-endian packed fields off an artifact, failing past its end.
struct Reader {
  const char* p;
  size_t left;
  template <class T>
  bool get(T* out, size_t n = 1) {
    size_t bytes = sizeof(T) * n;
    if (bytes > left || (n && bytes / n != sizeof(T))) return false;
    std::memcpy(out, p, bytes);
    p += bytes;
    left -= bytes;
    return true;
  }
};

bool fail_why(std::string* why, const std::string& text) {
  *why = text;
  return false;
}

}  // namespace

bool parse(const void* data, size_t size, Plan* out, std::string* why) {
  Reader r{static_cast<const char*>(data), size};
  char magic[8];
  uint32_t counts[4];
  uint64_t const_bytes = 0;
  if (!r.get(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) {
    return fail_why(why, "not a flagos-sim-plan-v1 artifact (bad magic)");
  }
  if (!r.get(counts, 4) || !r.get(&const_bytes)) return fail_why(why, "truncated header");
  Plan p;
  const uint64_t kAlign = 64;
  for (uint32_t i = 0; i < counts[0]; ++i) {
    uint32_t kind = 0, ndim = 0;
    int64_t shape[kMaxDims];
    uint64_t offset = 0;
    char name[64];
    if (!r.get(&kind) || !r.get(&ndim) || !r.get(shape, kMaxDims) || !r.get(&offset) || !r.get(name, 64)) {
      return fail_why(why, "truncated buffer table");
    }
    if (kind > 3 || ndim > kMaxDims) return fail_why(why, "buffer " + std::to_string(i) + ": bad kind or rank");
    Buffer b{static_cast<Kind>(kind), std::vector<int64_t>(shape, shape + ndim), offset,
             std::string(name, strnlen(name, sizeof name))};
    for (int64_t d : b.shape) {
      if (d < 0 || d > (int64_t(1) << 40)) return fail_why(why, "buffer " + b.name + ": bad dimension");
    }
    uint64_t bytes = static_cast<uint64_t>(b.numel()) * sizeof(float);
    if (b.kind == Kind::kConstant && (offset > const_bytes || bytes > const_bytes - offset)) {
      return fail_why(why, "constant " + b.name + " lies outside the constants");
    }
    if (b.kind == Kind::kTemp) {
      if (offset % kAlign) return fail_why(why, "temporary " + b.name + " is not 64-byte aligned");
      p.workspace = std::max<size_t>(p.workspace, offset + bytes);
    }
    p.buffers.push_back(std::move(b));
  }
  auto read_ids = [&](uint32_t n, Kind kind, std::vector<uint32_t>* ids, const char* what) {
    ids->resize(n);
    if (!r.get(ids->data(), n)) return fail_why(why, std::string("truncated ") + what + " list");
    for (uint32_t id : *ids) {
      if (id >= p.buffers.size() || p.buffers[id].kind != kind) {
        return fail_why(why, std::string(what) + " list names buffer " + std::to_string(id) + " of another kind");
      }
    }
    return true;
  };
  if (!read_ids(counts[1], Kind::kInput, &p.inputs, "input") ||
      !read_ids(counts[2], Kind::kOutput, &p.outputs, "output")) {
    return false;
  }
  for (uint32_t i = 0; i < counts[3]; ++i) {
    uint32_t head[3];
    if (!r.get(head, 3) || head[1] > (1u << 16) || head[2] > (1u << 16)) return fail_why(why, "truncated op list");
    Op op{static_cast<Code>(head[0]), std::vector<uint32_t>(head[1]), std::vector<int64_t>(head[2])};
    if (!r.get(op.args.data(), head[1]) || !r.get(op.attrs.data(), head[2])) {
      return fail_why(why, "truncated op " + std::to_string(i));
    }
    std::string bad = check_op(p, op);
    if (!bad.empty()) return fail_why(why, "op " + std::to_string(i) + ": " + bad);
    p.ops.push_back(std::move(op));
  }
  if (r.left != const_bytes) return fail_why(why, "constants size does not match the header");
  p.constants.assign(r.p, r.p + const_bytes);
  *out = std::move(p);
  return true;
}

}  // namespace plan

LoadedPlan::~LoadedPlan() {
  if (constants) Sim::free(device, constants, constant_bytes);
}

const char* Sim::graph_formats() { return plan::kFormat; }

Status Sim::graph_load(Graph& g, const char*, const void* artifact, size_t size) {
  auto loaded = std::make_shared<LoadedPlan>();
  std::string why;
  if (!plan::parse(artifact, size, &loaded->plan, &why)) {
    return kit::fail(FLAGOS_ERROR_INVALID_VALUE, "graph_load: %s", why.c_str());
  }
  const plan::Plan& p = loaded->plan;
  loaded->device = g.device;
  if (!p.constants.empty()) {
    FLAGOS_KIT_TRY(Sim::malloc(g.device, p.constants.size(), &loaded->constants));
    std::memcpy(loaded->constants, p.constants.data(), p.constants.size());
    loaded->constant_bytes = p.constants.size();
    std::vector<char>().swap(loaded->plan.constants);  // the device copy is the one used
  }
  auto describe = [&](uint32_t id) {
    const plan::Buffer& b = p.buffers[id];
    flagos_graph_tensor_info_t t;
    std::memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    std::snprintf(t.name, sizeof t.name, "%s", b.name.c_str());
    t.dtype = FLAGOS_DTYPE_FLOAT32;
    t.ndim = static_cast<int32_t>(b.shape.size());
    for (size_t i = 0; i < b.shape.size(); ++i) t.shape[i] = b.shape[i];
    t.size_bytes = static_cast<uint64_t>(b.numel()) * sizeof(float);
    return t;
  };
  for (uint32_t id : p.inputs) g.inputs.push_back(describe(id));
  for (uint32_t id : p.outputs) g.outputs.push_back(describe(id));
  g.workspace_size = p.workspace;
  g.loaded = std::move(loaded);
  return FLAGOS_SUCCESS;
}

Status Sim::graph_execute(Graph& g, const void* const* inputs, void* const* outputs, void* workspace,
                          Stream& stream) {
  std::shared_ptr<const LoadedPlan> loaded = g.loaded;
  const plan::Plan& p = loaded->plan;
  // Every buffer's address, resolved now: the task owns them and the plan.
  std::vector<float*> addr(p.buffers.size(), nullptr);
  char* consts = static_cast<char*>(loaded->constants);
  char* ws = static_cast<char*>(workspace);
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const plan::Buffer& b = p.buffers[i];
    if (b.kind == plan::Kind::kConstant) addr[i] = reinterpret_cast<float*>(consts + b.offset);
    if (b.kind == plan::Kind::kTemp) addr[i] = reinterpret_cast<float*>(ws + b.offset);
  }
  for (size_t i = 0; i < p.inputs.size(); ++i) addr[p.inputs[i]] = static_cast<float*>(const_cast<void*>(inputs[i]));
  for (size_t i = 0; i < p.outputs.size(); ++i) addr[p.outputs[i]] = static_cast<float*>(outputs[i]);
  stream.push([loaded, addr = std::move(addr)] {
    for (const plan::Op& op : loaded->plan.ops) plan::run_op(loaded->plan, op, addr.data());
  });
  return FLAGOS_SUCCESS;
}

Status Sim::graph_destroy(Graph& g) {
  g.loaded.reset();  // the constants go when the last queued execution has run
  return FLAGOS_SUCCESS;
}

}  // namespace flagos_sim
