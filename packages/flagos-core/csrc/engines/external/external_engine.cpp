// Providers whose engine lives in another shared library (include/flagos/provider_engine.h):
// the capsule handed over from Python is checked here and its engine registered with the
// dispatcher as an EXTERNAL provider.
#include <Python.h>

#include <c10/util/Exception.h>

#include "engines/external/external_engine.h"
#include "flagos/provider_engine.h"
#include "router/dispatcher.h"

namespace flagos {

void register_external_provider_capsule(const std::string& name, void* capsule) {
  auto* obj = static_cast<PyObject*>(capsule);
  TORCH_CHECK(obj && PyCapsule_IsValid(obj, FLAGOS_PROVIDER_ENGINE_CAPSULE),
              "flagos: provider '", name, "' needs a PyCapsule named '",
              FLAGOS_PROVIDER_ENGINE_CAPSULE, "' (see flagos/provider_engine.h)");
  auto* engine = static_cast<const flagos_provider_engine_t*>(
      PyCapsule_GetPointer(obj, FLAGOS_PROVIDER_ENGINE_CAPSULE));
  TORCH_CHECK(engine && engine->struct_size >= sizeof(flagos_provider_engine_t) &&
                  engine->version == FLAGOS_PROVIDER_ENGINE_VERSION && engine->run,
              "flagos: provider '", name, "' hands over an engine of version ",
              engine ? engine->version : 0, " (", engine ? engine->struct_size : 0,
              " bytes); this flagos-core takes version ", FLAGOS_PROVIDER_ENGINE_VERSION,
              ". Rebuild the provider against this flagos-core");
  register_external_provider(name, ExternalEngine{engine->run, engine->ctx});
}

}  // namespace flagos
