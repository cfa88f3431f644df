// Whether this build of flagos records device activity for torch.profiler: it needs a torch
// built with Kineto whose headers carry the PrivateUse1 profiler registry (torch 2.13 has
// it; built against an older release, flagos ops are on the CPU timeline only).
#pragma once

namespace flagos {

bool kineto_plugin_available();

}  // namespace flagos
