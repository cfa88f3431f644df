// Kernels of random ops that take no generator argument (native_dropout's) draw from their
// device's default generator. On a twin whose default generator is not the one of the
// flagos generator (a CPU twin: flagos keeps a CPU generator of its own, so that seeding
// flagos leaves torch's CPU generator alone), such a call runs with the twin's default
// generator holding the flagos generator's state, which takes the advanced state back
// after. So those ops follow flagos' seed and get_rng_state / set_rng_state like every
// other random op. On a CUDA twin the flagos default generator's CUDA generator is CUDA's
// default one: nothing is lent there.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <mutex>

namespace flagos {

// A random op (tagged nondeterministic_seeded) without a Generator argument.
bool draws_from_default_generator(const c10::OperatorHandle& op);

// For its lifetime, `twin`'s default generator holds the state of `lent`; then `lent`
// takes the state the calls left and the default generator gets its own back (nothing is
// lent where `lent` is that default generator). Lendings are serialized process-wide
// (waiting without the GIL), so two threads never lend at once. Python has it as
// `flagos._C._DefaultGeneratorLent(generator, device_type, index)`, a context manager, for
// library kernels that ignore the generator they are given.
class DefaultGeneratorLent {
 public:
  DefaultGeneratorLent(at::Generator lent, c10::Device twin);
  // Lends flagos:`device`'s default generator for that twin.
  DefaultGeneratorLent(c10::DeviceIndex device, c10::Device twin);
  ~DefaultGeneratorLent();
  DefaultGeneratorLent(const DefaultGeneratorLent&) = delete;
  DefaultGeneratorLent& operator=(const DefaultGeneratorLent&) = delete;

 private:
  std::unique_lock<std::recursive_mutex> lock_;
  at::Generator default_;
  at::Generator flagos_;
  at::Tensor own_;
};

}  // namespace flagos
