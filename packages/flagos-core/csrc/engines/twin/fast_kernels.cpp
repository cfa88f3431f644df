// Unboxed kernels for hot ops: the twin engine called without a stack of IValues.
//
// Every op reaches flagos' boxed fallback (dispatcher.cpp), which works for all of them
// but costs, per small op, about as much as the op itself on the CPU: the arguments are
// boxed into IValues (and copying a tensor that Python holds takes the GIL twice, torch's
// PyObject preservation), and a structured op (add, mm, softmax, ...) first runs its
// CompositeExplicitAutogradNonFunctional kernel, which computes the output's meta, makes a
// flagos tensor and calls the out= op, whose twin kernel computes the same meta again.
//
// The ops listed at the bottom get an unboxed PrivateUse1 kernel instead. When the op's
// route on the tensors' device starts with the twin engine (dispatcher.h, twin_route), it
// aliases the arguments without copying them (TwinCall, borrowed) and calls the twin's
// kernel directly: for a structured op the functional kernel itself, whose result is
// allocated in flagos memory (engines/twin/host_results.h, engines/twin/device_results.h). Otherwise it
// does what torch would have done without it: the composite kernel for structured
// functional and in-place ops (so routes and providers see the same out= ops as before),
// the boxed fallback for the rest. Results, stats and errors are those of the boxed route.
#include <ATen/CompositeExplicitAutogradNonFunctionalFunctions.h>
#include <ATen/Operators.h>
#include <ATen/ops/relu_native.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <torch/library.h>

#include <tuple>
#include <type_traits>

#include "aten/alias.h"
#include "engines/launch/launch_cache.h"
#include "engines/twin/twin_call.h"
#include "router/dispatcher.h"
#include "router/op_clock.h"
#include "runtime/device_activity.h"
#include "runtime/stream.h"

namespace flagos {
namespace {

template <class A>
constexpr bool is_tensor_arg =
    std::is_same_v<std::decay_t<A>, at::Tensor> || std::is_same_v<std::decay_t<A>, std::optional<at::Tensor>>;

// Argument types the fast path maps (tensors, optional tensors, generators) or passes as
// they are; lists of tensors and device arguments are left to the boxed route.
template <class A>
constexpr bool is_supported_arg = !std::is_same_v<std::decay_t<A>, at::TensorList> &&
                                  !std::is_same_v<std::decay_t<A>, at::ITensorListRef> &&
                                  !std::is_same_v<std::decay_t<A>, std::optional<at::Device>> &&
                                  !std::is_same_v<std::decay_t<A>, at::Device>;

template <class A>
void note_device(std::optional<c10::DeviceIndex>& device, const A& a) {
  using D = std::decay_t<A>;
  if constexpr (std::is_same_v<D, at::Tensor>) {
    if (!device && is_flagos(a)) device = a.device().index();
  } else if constexpr (std::is_same_v<D, std::optional<at::Tensor>>) {
    if (!device && a && is_flagos(*a)) device = a->device().index();
  }
}

// Whether a tensor argument may go to the twin kernel of an op on flagos:`device`: the
// same flagos device, or a 0-dim CPU tensor (a scalar, which native kernels accept too).
// Anything else takes torch's own path, which raises its device error where it has one
// (on a CPU twin the kernel could not tell a CPU or other-device tensor from an alias).
inline bool fits_device(const at::Tensor& t, c10::DeviceIndex device) {
  if (!t.defined()) return true;
  if (t.device().type() == c10::DeviceType::PrivateUse1) return t.device().index() == device;
  return t.device().is_cpu() && t.dim() == 0;
}

template <class A>
bool on_device(const A& a, c10::DeviceIndex device) {
  using D = std::decay_t<A>;
  if constexpr (std::is_same_v<D, at::Tensor>) return fits_device(a, device);
  else if constexpr (std::is_same_v<D, std::optional<at::Tensor>>) return !a || fits_device(*a, device);
  else return true;
}

// The routing state of an at::_ops op, looked up once (it lives as long as the process).
template <class Op>
OpState& routing_state_of() {
  static OpState& st = routing_state(
      c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name));
  return st;
}

template <class A>
constexpr bool is_mutable_tensor_arg = std::is_same_v<A, at::Tensor&>;

template <class A>
decltype(auto) to_kernel(TwinCall& call, A&& a) {
  using D = std::decay_t<A>;
  if constexpr (std::is_same_v<D, at::Tensor>) {
    return static_cast<at::Tensor&>(call.alias(a, is_mutable_tensor_arg<A>));
  } else if constexpr (std::is_same_v<D, std::optional<at::Tensor>>) {
    return call.alias(a);
  } else if constexpr (std::is_same_v<D, std::optional<at::Generator>>) {
    return call.generator(a);
  } else {
    return std::forward<A>(a);
  }
}

// In-place and out= results are the caller's own mutable arguments, by position (the
// i-th Tensor& result is the i-th Tensor& argument, as in every in-place and out= schema),
// never another handle of the same tensor; fresh results become flagos tensors.
template <class R>
struct Results {
  static_assert(std::is_same_v<R, at::Tensor> || std::is_same_v<R, at::Tensor&>,
                "fast kernels return tensors, tensor references or tuples of them");
  template <size_t N>
  static R from_twin(TwinCall& call, R r, const std::array<at::Tensor*, N>& mutable_args,
                     size_t& next_mutable) {
    if constexpr (std::is_same_v<R, at::Tensor&>) {
      TORCH_INTERNAL_ASSERT(next_mutable < N, "flagos: more Tensor& results than arguments");
      return *mutable_args[next_mutable++];
    } else {
      return call.from_twin(r);
    }
  }
};

template <class... Rs>
struct Results<std::tuple<Rs...>> {
  template <size_t N>
  static std::tuple<Rs...> from_twin(TwinCall& call, std::tuple<Rs...> r,
                                     const std::array<at::Tensor*, N>& mutable_args,
                                     size_t& next_mutable) {
    return std::apply(
        [&](auto&&... e) {
          // Braced initialization maps the elements left to right (result positions).
          return std::tuple<Rs...>{Results<Rs>::from_twin(
              call, std::forward<decltype(e)>(e), mutable_args, next_mutable)...};
        },
        std::move(r));
  }
};

// `Composite`: the op's CompositeExplicitAutogradNonFunctional kernel, or nullptr.
// `OutOp`: for such an op, its out= form (at::_ops::<op>_out), which the composite calls;
// void else. `OnDeviceTwin`: for a functional op whose twin kernel is written in other ops
// (relu is clamp_min), that definition (see ReluOnDeviceTwin); void else.
template <class Op, typename Op::schema* Composite, class OutOp, class OnDeviceTwin,
          class Sig = typename Op::schema>
struct FastKernel;

template <class Op, typename Op::schema* Composite, class OutOp, class OnDeviceTwin, class Ret,
          class... Args>
struct FastKernel<Op, Composite, OutOp, OnDeviceTwin, Ret(Args...)> {
  static_assert((is_supported_arg<Args> && ...), "argument type not supported by fast kernels");
  static_assert((0 + ... + int(is_tensor_arg<Args>)) <= int(TwinCall::kMaxUnboxedTensors));

  static const c10::OperatorHandle& handle() {
    static const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
    return op;
  }

  static Ret call(c10::DispatchKeySet keys, Args... args) {
    std::optional<c10::DeviceIndex> device;
    (note_device(device, args), ...);
    const c10::OperatorHandle& op = handle();
    std::optional<TwinRoute> route;
    if (device && (on_device(args, *device) && ...)) route = twin_route(routing_state_of<Op>(), *device);
    if constexpr (!std::is_void_v<OutOp>) {
      // Without this kernel the op would reach the dispatcher as its out= form (through the
      // composite): a route for that form (a provider serving only add.out) must still see it.
      if (route && !route->same_as(twin_route(routing_state_of<OutOp>(), *device))) route.reset();
    }
    // On a device twin (CUDA) whose kernels cannot allocate in flagos memory (flagos built
    // without CUDA support, engines/twin/device_results.h) the functional kernel's result would be
    // copied: a structured op keeps the composite, which allocates a flagos result and
    // calls the out= op.
    if (route && route->twin != c10::DeviceType::CPU && !std::is_reference_v<Ret> &&
        !device_results_on(route->twin)) {
      if constexpr (Composite != nullptr) {
        return (*Composite)(std::forward<Args>(args)...);
      } else if constexpr (!std::is_void_v<OnDeviceTwin>) {
        if (OnDeviceTwin::applies(*route, *device)) {
          spoil_launch_recording();  // the twin computes, without a HAL launch
          return OnDeviceTwin::run(std::forward<Args>(args)...);
        }
      }
    }
    if (!route) {
      // A foreign library (FlagGems) serves the functional form itself: the op goes down
      // its own route rather than the composite's out= form (routed_as_themselves.h).
      bool own_route = Composite != nullptr && device && (on_device(args, *device) && ...) &&
                       route_starts_foreign(routing_state_of<Op>(), *device);
      if constexpr (Composite != nullptr) {
        if (!own_route) return (*Composite)(std::forward<Args>(args)...);
        return c10::impl::BoxedKernelWrapper<Ret(Args...)>::call(
            c10::BoxedKernel::makeFromFunction<&run_routed>(), op, keys,
            std::forward<Args>(args)...);
      } else {
        return c10::impl::BoxedKernelWrapper<Ret(Args...)>::call(
            c10::BoxedKernel::makeFromFunction<&run_routed>(), op, keys,
            std::forward<Args>(args)...);
      }
    }
    spoil_launch_recording();  // the twin computes, without a HAL launch
    device_activity::Scope span(op, [&] { return provider_name(route->provider); }, *device);
    uint64_t start = op_clock::now();
    TwinCall twin_call(*device, route->twin, &op);
    // Braced initialization aliases the arguments left to right, before enter().
    std::tuple<decltype(to_kernel(twin_call, args))...> on_twin{to_kernel(twin_call, args)...};
    twin_call.enter();
    // Until the call returns: fresh results are adopted inside it (host/device results).
    TwinCall::KernelScope scope(twin_call);
    Ret result = std::apply(
        [&](auto&&... a) -> decltype(auto) {
          return Op::redispatch(twin_call.twin_keys(), std::forward<decltype(a)>(a)...);
        },
        on_twin);
    twin_call.finish();
    std::array<at::Tensor*, (0 + ... + size_t(is_mutable_tensor_arg<Args>))> mutable_args{};
    size_t n_mutable = 0;
    (
        [&](auto& a) {
          if constexpr (is_mutable_tensor_arg<decltype(a)>) mutable_args[n_mutable++] = &a;
        }(args),
        ...);
    size_t next_mutable = 0;
    Ret out = Results<Ret>::from_twin(twin_call, std::forward<Ret>(result), mutable_args,
                                      next_mutable);
    record_call(route->counters, op_clock::now() - start);
    return out;
  }
};

namespace composite = at::compositeexplicitautogradnonfunctional;

// relu's kernel (CPU and CUDA alike) is clamp_min(self, 0). On a device twin it runs as
// that on flagos, where clamp_min's result is allocated in flagos memory, when clamp_min's
// out= form (what then runs) is routed to the same provider: a route that sends relu to a
// provider must not send it elsewhere.
struct ReluOnDeviceTwin {
  static bool applies(const TwinRoute& relu_route, c10::DeviceIndex device) {
    return relu_route.same_as(twin_route(routing_state_of<at::_ops::clamp_min_out>(), device));
  }
  static at::Tensor run(const at::Tensor& self) { return at::native::relu(self); }
};

template <class Op, typename Op::schema* Composite = nullptr, class OutOp = void,
          class OnDeviceTwin = void>
void register_fast(torch::Library& m) {
  std::string name = std::string(Op::name).substr(6);  // without "aten::"
  if (Op::overload_name[0]) name += std::string(".") + Op::overload_name;
  note_routed_kernel_op(name);
  m.impl(name.c_str(), torch::CppFunction::makeFromUnboxedFunction(
             TORCH_FN((&FastKernel<Op, Composite, OutOp, OnDeviceTwin>::call))));
}

// A structured op's functional (or in-place) form, with its composite kernel, and the
// out= form that composite calls.
template <class Op, typename Op::schema* Composite, class OutOp>
void register_structured(torch::Library& m) {
  register_fast<Op, Composite, OutOp>(m);
  register_fast<OutOp>(m);
}

}  // namespace

// The hot ops of training and inference: elementwise math, matmuls, reductions, softmax,
// activations and their backwards, the optimizer's in-place updates, losses.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace at::_ops;
  // Overloaded composite kernels, picked by the op's signature.
  constexpr div_Tensor::schema* div_fn = &composite::div;
  constexpr div__Tensor::schema* div__fn = &composite::div_;
  constexpr pow_Tensor_Scalar::schema* pow_fn = &composite::pow;
  constexpr lerp__Scalar::schema* lerp__fn = &composite::lerp_;
  constexpr clamp_min::schema* clamp_min_fn = &composite::clamp_min;
  // Structured ops: each form with its composite kernel and the out= form it calls.
  register_structured<add_Tensor, &composite::add, add_out>(m);
  register_fast<add__Tensor, &composite::add_, add_out>(m);
  register_structured<sub_Tensor, &composite::sub, sub_out>(m);
  register_fast<sub__Tensor, &composite::sub_, sub_out>(m);
  register_structured<mul_Tensor, &composite::mul, mul_out>(m);
  register_fast<mul__Tensor, &composite::mul_, mul_out>(m);
  register_structured<div_Tensor, div_fn, div_out>(m);
  register_fast<div__Tensor, div__fn, div_out>(m);
  register_structured<mm, &composite::mm, mm_out>(m);
  register_structured<addmm, &composite::addmm, addmm_out>(m);
  register_structured<bmm, &composite::bmm, bmm_out>(m);
  register_structured<_softmax, &composite::_softmax, _softmax_out>(m);
  register_structured<_log_softmax, &composite::_log_softmax, _log_softmax_out>(m);
  register_structured<_softmax_backward_data, &composite::_softmax_backward_data, _softmax_backward_data_out>(m);
  register_structured<_log_softmax_backward_data, &composite::_log_softmax_backward_data, _log_softmax_backward_data_out>(m);
  register_structured<sum_dim_IntList, &composite::sum, sum_IntList_out>(m);
  register_structured<mean_dim, &composite::mean, mean_out>(m);
  register_structured<gelu, &composite::gelu, gelu_out>(m);
  register_structured<gelu_backward, &composite::gelu_backward, gelu_backward_grad_input>(m);
  register_structured<silu, &composite::silu, silu_out>(m);
  register_structured<silu_backward, &composite::silu_backward, silu_backward_grad_input>(m);
  register_structured<neg, &composite::neg, neg_out>(m);
  register_structured<at::_ops::exp, &composite::exp, exp_out>(m);
  register_structured<rsqrt, &composite::rsqrt, rsqrt_out>(m);
  register_structured<at::_ops::sqrt, &composite::sqrt, sqrt_out>(m);
  register_structured<at::_ops::tanh, &composite::tanh, tanh_out>(m);
  register_structured<sigmoid, &composite::sigmoid, sigmoid_out>(m);
  register_structured<pow_Tensor_Scalar, pow_fn, pow_Tensor_Scalar_out>(m);
  register_structured<threshold_backward, &composite::threshold_backward, threshold_backward_grad_input>(m);
  register_fast<addcmul_, &composite::addcmul_, addcmul_out>(m);
  register_fast<addcdiv_, &composite::addcdiv_, addcdiv_out>(m);
  register_fast<lerp__Scalar, lerp__fn, lerp_Scalar_out>(m);
  register_structured<clamp_min, clamp_min_fn, clamp_min_out>(m);
  register_structured<maximum, &composite::maximum, maximum_out>(m);
  register_structured<nll_loss_forward, &composite::nll_loss_forward_symint, nll_loss_forward_output>(m);
  register_structured<nll_loss_backward, &composite::nll_loss_backward_symint, nll_loss_backward_grad_input>(m);
  // Not structured: the twin's own kernels.
  register_fast<relu, nullptr, void, ReluOnDeviceTwin>(m);
  register_fast<relu_>(m);
  register_fast<native_layer_norm>(m);
  register_fast<native_layer_norm_backward>(m);
  register_fast<embedding_dense_backward>(m);
  register_fast<where_self>(m);
  register_fast<index_select>(m);
}

}  // namespace flagos
