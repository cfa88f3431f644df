// flagos HAL kit: the optional graph runtime (ABI 1.1, flagos_hal.h "graph runtime").
//
// A vendor whose chip executes whole compiled graphs adds to its class:
//
//   struct Graph : kit::GraphBase { ... };         // your per-graph state
//   static const char* graph_formats();             // "acme-npu-v3" (comma-separated)
//   // Parse `artifact` (format is one of graph_formats), upload what the device needs,
//   // and fill g.inputs, g.outputs and g.workspace_size. g.device is set.
//   static Status graph_load(Graph& g, const char* format, const void* artifact, size_t size);
//   // Queue one execution on `stream` (of g.device); the kit checked the counts, the
//   // pointers (non-NULL, with kCheckRanges inside live device allocations of the right
//   // size) and the stream's device.
//   static Status graph_execute(Graph& g, const void* const* inputs, void* const* outputs,
//                               void* workspace, Stream& stream);
//   static Status graph_destroy(Graph& g);          // after queued executions finish
//
// and the kit fills the table's graph_* entries. A vendor class without `Graph` leaves them
// NULL: its table says (FLAGOS_HAL_HAS) that it has no graph runtime.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "flagos_hal/flagos_hal.h"
#include "flagos_hal/kit/errors.hpp"
#include "flagos_hal/kit/registry.hpp"

namespace flagos_hal {
namespace kit {

// What the kit keeps for every graph; a vendor's Graph derives from it.
struct GraphBase {
  int device = 0;
  std::vector<flagos_graph_tensor_info_t> inputs, outputs;  // filled by V::graph_load
  size_t workspace_size = 0;
};

// Bytes of one element of `dtype`, 0 for an unknown one.
inline size_t dtype_size(flagos_dtype_t dtype) {
  switch (dtype) {
    case FLAGOS_DTYPE_FLOAT32: case FLAGOS_DTYPE_INT32: return 4;
    case FLAGOS_DTYPE_FLOAT16: case FLAGOS_DTYPE_BFLOAT16: return 2;
    case FLAGOS_DTYPE_INT64: return 8;
    case FLAGOS_DTYPE_INT8: case FLAGOS_DTYPE_UINT8: case FLAGOS_DTYPE_BOOL: return 1;
  }
  return 0;
}

// Whether `name` is one of the comma-separated `formats`.
inline bool format_listed(const char* formats, const char* name) {
  std::string all(formats ? formats : ""), want(name);
  for (size_t pos = 0; pos <= all.size();) {
    size_t comma = all.find(',', pos);
    if (comma == std::string::npos) comma = all.size();
    if (all.compare(pos, comma - pos, want) == 0 && comma - pos == want.size()) return true;
    pos = comma + 1;
  }
  return false;
}

namespace detail {
template <class V, class = void>
struct HasGraph : std::false_type {};
template <class V>
struct HasGraph<V, std::void_t<typename V::Graph>> : std::true_type {};
}  // namespace detail

// The graph_* table entries of Hal<V> (kit.hpp), for a vendor class with a Graph.
template <class V, class H>
struct GraphRuntime {
  using Graph = typename V::Graph;
  using Stream = typename V::Stream;
  static_assert(std::is_base_of<GraphBase, Graph>::value, "V::Graph must derive from kit::GraphBase");

  static HandleRegistry<Graph>& graphs() {
    static auto* r = new HandleRegistry<Graph>;  // never destroyed: calls may come during exit
    return *r;
  }
  static Status bad_graph(const char* fn) {
    return fail(FLAGOS_ERROR_INVALID_HANDLE, "%s: unknown or destroyed graph", fn);
  }

  static Status get_formats(const char** formats) {
    if (!formats) return fail(FLAGOS_ERROR_INVALID_VALUE, "graph_get_formats: formats is NULL");
    *formats = V::graph_formats();
    return FLAGOS_SUCCESS;
  }
  static Status load(int device, const char* format, const void* artifact, size_t size,
                     flagos_graph_t* graph) {
    if (!graph) return fail(FLAGOS_ERROR_INVALID_VALUE, "graph_load: graph is NULL");
    if (!format) return fail(FLAGOS_ERROR_INVALID_VALUE, "graph_load: format is NULL");
    if (!artifact || size == 0) return fail(FLAGOS_ERROR_INVALID_VALUE, "graph_load: empty artifact");
    FLAGOS_KIT_TRY(H::require_device(device, "graph_load"));
    if (!format_listed(V::graph_formats(), format)) {
      return fail(FLAGOS_ERROR_NOT_SUPPORTED,
                  "graph_load: format '%s' is not one this runtime loads (it loads: %s)", format,
                  V::graph_formats());
    }
    auto obj = std::make_shared<Graph>();
    obj->device = device;
    FLAGOS_KIT_TRY(V::graph_load(*obj, format, artifact, size));
    graphs().add(obj);
    *graph = reinterpret_cast<flagos_graph_t>(obj.get());
    return FLAGOS_SUCCESS;
  }
  static Status get_info(flagos_graph_t graph, int* num_inputs, int* num_outputs, size_t* workspace) {
    if (!num_inputs || !num_outputs || !workspace) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "graph_get_info: an output is NULL");
    }
    std::shared_ptr<Graph> g = graphs().find(graph);
    if (!g) return bad_graph("graph_get_info");
    *num_inputs = static_cast<int>(g->inputs.size());
    *num_outputs = static_cast<int>(g->outputs.size());
    *workspace = g->workspace_size;
    return FLAGOS_SUCCESS;
  }
  static Status get_tensor_info(flagos_graph_t graph, int is_output, int index,
                                flagos_graph_tensor_info_t* info) {
    if (!info) return fail(FLAGOS_ERROR_INVALID_VALUE, "graph_get_tensor_info: info is NULL");
    if (info->struct_size < sizeof(uint32_t)) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "graph_get_tensor_info: info->struct_size (%u) is too small",
                  info->struct_size);
    }
    std::shared_ptr<Graph> g = graphs().find(graph);
    if (!g) return bad_graph("graph_get_tensor_info");
    const auto& list = is_output ? g->outputs : g->inputs;
    if (index < 0 || static_cast<size_t>(index) >= list.size()) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "graph_get_tensor_info: %s %d out of range (the graph has %zu)",
                  is_output ? "output" : "input", index, list.size());
    }
    flagos_graph_tensor_info_t t = list[index];
    t.struct_size = info->struct_size;
    std::memcpy(info, &t, info->struct_size < sizeof t ? info->struct_size : sizeof t);
    return FLAGOS_SUCCESS;
  }
  // Pointers of one side of an execution: non-NULL, and with kCheckRanges inside a live
  // device allocation of the graph's device that holds the whole tensor.
  static Status check_buffers(const Graph& g, const void* const* ptrs, int n, bool outputs) {
    const auto& list = outputs ? g.outputs : g.inputs;
    const char* side = outputs ? "output" : "input";
    if (n != static_cast<int>(list.size())) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "graph_execute: %d %ss given, the graph has %zu", n, side,
                  list.size());
    }
    if (n && !ptrs) return fail(FLAGOS_ERROR_INVALID_VALUE, "graph_execute: %ss is NULL", side);
    for (int i = 0; i < n; ++i) {
      size_t bytes = list[i].size_bytes;
      if (bytes == 0) continue;
      if (!ptrs[i]) return fail(FLAGOS_ERROR_INVALID_VALUE, "graph_execute: %s %d (%s) is NULL", side, i, list[i].name);
      if constexpr (V::kCheckRanges) {
        int dev = H::device_of_range(ptrs[i], bytes);
        if (dev != g.device) {
          return fail(FLAGOS_ERROR_INVALID_VALUE,
                      "graph_execute: %s %d (%s, %zu bytes at %p) is not inside a live allocation of device %d",
                      side, i, list[i].name, bytes, ptrs[i], g.device);
        }
      }
    }
    return FLAGOS_SUCCESS;
  }
  static Status execute(flagos_graph_t graph, const void* const* inputs, int num_inputs,
                        void* const* outputs, int num_outputs, void* workspace, flagos_stream_t stream) {
    std::shared_ptr<Graph> g = graphs().find(graph);
    if (!g) return bad_graph("graph_execute");
    Stream* s = H::stream(stream);
    if (!s) return fail(FLAGOS_ERROR_INVALID_HANDLE, "graph_execute: unknown or destroyed stream");
    if (s->device != g->device) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "graph_execute: the stream is on device %d, the graph on %d",
                  s->device, g->device);
    }
    FLAGOS_KIT_TRY(check_buffers(*g, inputs, num_inputs, false));
    FLAGOS_KIT_TRY(check_buffers(*g, const_cast<const void* const*>(outputs), num_outputs, true));
    if (g->workspace_size && !workspace) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "graph_execute: the graph needs %zu bytes of workspace, got NULL",
                  g->workspace_size);
    }
    return V::graph_execute(*g, inputs, outputs, workspace, *s);
  }
  static Status destroy(flagos_graph_t graph) {
    bool found = false;
    std::shared_ptr<Graph> g = graphs().remove_if(graph, [](const Graph&) { return true; }, &found);
    if (!g) return bad_graph("graph_destroy");
    return V::graph_destroy(*g);
  }
};

}  // namespace kit
}  // namespace flagos_hal
