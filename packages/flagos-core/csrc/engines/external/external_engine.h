// EXTERNAL providers: engines that live in another shared library and run without the GIL
// (python/flagos/include/flagos/provider_engine.h, flagos-ops-native's binder). The router
// keeps each one's ExternalEngine (router/dispatcher.h); this folder checks what a package
// hands over.
#pragma once

#include <string>

namespace flagos {

// From a PyCapsule (a borrowed PyObject*) holding a flagos_provider_engine_t: checks its
// name and version, then registers the engine as EXTERNAL provider `name`.
void register_external_provider_capsule(const std::string& name, void* capsule);

}  // namespace flagos
