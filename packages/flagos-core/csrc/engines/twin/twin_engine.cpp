// The twin engine's boxed entry (the `boxing` provider): the op runs on zero-copy aliases of
// its flagos arguments on the HAL's native twin device.
#include "engines/twin/twin_engine.h"

#include "capture/capture_state.h"
#include "engines/cpu/cpu_engine.h"
#include "engines/twin/captured_host_call.h"
#include "engines/twin/twin_attention.h"
#include "router/dispatcher.h"

namespace flagos {

void run_twin(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device) {
  auto twin = twin_device_type(device);
  TORCH_CHECK(twin, "flagos: the twin engine (provider boxing) needs a HAL whose memory a native device "
                    "can address; flagos:", int(device), " is opaque. Route ", op_full_name(op),
              " to another provider");
  if (*twin == c10::DeviceType::CPU && capture::current_stream_capturing(device)) {
    return record_host_twin_call(op, stack, device);
  }
  if (*twin != c10::DeviceType::CPU && run_twin_attention(op, stack, device, *twin)) return;
  auto run = [&](torch::jit::Stack* s) { TwinCall(device, *twin).run(op, s); };
  if (*twin == c10::DeviceType::CPU && run_with_cpu_dtype_gaps_closed(op, stack, run)) return;
  run(stack);
}

}  // namespace flagos
