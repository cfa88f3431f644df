// Whether this build of flagos records device activity for torch.profiler: it needs a torch
// built with Kineto whose headers carry the PrivateUse1 profiler registry (torch 2.13 has
// it; older releases profile flagos ops on the CPU timeline only).
#pragma once

#if defined(USE_KINETO) && __has_include(<torch/csrc/profiler/standalone/privateuse1_profiler.h>) && \
    __has_include(<libkineto.h>)
#define FLAGOS_HAS_KINETO_PLUGIN 1
#else
#define FLAGOS_HAS_KINETO_PLUGIN 0
#endif

namespace flagos {

bool kineto_plugin_available();

}  // namespace flagos
