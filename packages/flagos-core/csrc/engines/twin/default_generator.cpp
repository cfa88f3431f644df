#include "engines/twin/default_generator.h"

#include <ATen/Context.h>

#include "engines/python/python_engine.h"
#include "engines/twin/twin_call.h"

namespace flagos {
namespace {

std::recursive_mutex& lending() {
  static std::recursive_mutex mutex;
  return mutex;
}

// Set while this thread lends: a random op run inside (none of torch's kernels does so)
// draws from the default generator that already holds the flagos state.
thread_local bool lending_here = false;

at::Tensor state_of(at::Generator g) {  // a handle: the same generator
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}

void set_state(at::Generator& g, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

}  // namespace

bool draws_from_default_generator(const c10::OperatorHandle& op) {
  if (!op.hasTag(at::Tag::nondeterministic_seeded)) return false;
  for (const auto& arg : op.schema().arguments()) {
    if (is_optional_generator(arg)) return false;  // a Generator or Generator?
  }
  return true;
}

DefaultGeneratorLent::DefaultGeneratorLent(at::Generator lent, c10::Device twin) {
  at::Generator def = twin.is_cpu() ? at::detail::getDefaultCPUGenerator()
                                    : at::globalContext().defaultGenerator(twin);
  if (lending_here || !lent.defined() ||
      lent.unsafeGetGeneratorImpl() == def.unsafeGetGeneratorImpl())
    return;
  lock_ = lock_releasing_gil(lending());
  lending_here = true;
  default_ = def;
  flagos_ = lent;
  own_ = state_of(default_);
  set_state(default_, state_of(flagos_));
}

DefaultGeneratorLent::DefaultGeneratorLent(c10::DeviceIndex device, c10::Device twin)
    : DefaultGeneratorLent(twin_generator_for(std::nullopt, device, twin.type())
                               .value_or(at::Generator()),
                           twin) {}

DefaultGeneratorLent::~DefaultGeneratorLent() {
  if (!default_.defined()) return;
  lending_here = false;
  try {
    set_state(flagos_, state_of(default_));
    set_state(default_, own_);
  } catch (...) {  // a destructor must not throw; the states stay as the kernel left them
  }
}

}  // namespace flagos
