// The engine of a C++ op provider built as its own shared library (flagos-ops-native's
// kernel-library binder is one): a function the flagos dispatcher calls, without the GIL,
// with the op, its boxed arguments and the flagos device, when the provider's turn in
// the op's routing chain comes.
//
// The library fills a flagos_provider_engine_t that lives for the process and hands it to
// the core as a PyCapsule named FLAGOS_PROVIDER_ENGINE_CAPSULE:
//
//     flagos.provider_api.register_external_provider("native", capsule)
//
// The call is C++ (it takes torch's own types), so the library must be built against the
// torch the core runs with; the struct is versioned so that it can grow.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>

#define FLAGOS_PROVIDER_ENGINE_CAPSULE "flagos.provider_engine"
#define FLAGOS_PROVIDER_ENGINE_VERSION 1u

struct flagos_provider_engine_t {
  uint32_t struct_size;  // sizeof(flagos_provider_engine_t) the library was built with
  uint32_t version;      // FLAGOS_PROVIDER_ENGINE_VERSION
  // Runs `op` on flagos:`device` with its arguments on top of `stack`. Returns true when
  // it ran (the arguments replaced by the results, as a boxed kernel does), false to
  // decline: the stack must then be untouched, and the next provider of the chain runs.
  // May throw (a c10::Error) for a real failure of an op it accepted.
  bool (*run)(void* ctx, const c10::OperatorHandle& op, torch::jit::Stack* stack,
              c10::DeviceIndex device);
  void* ctx;  // passed to run; owned by the library
};
