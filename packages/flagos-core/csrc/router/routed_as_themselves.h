// Structured ops' functional and in-place forms (log, cos_, ...) reach the flagos
// dispatcher as their out= form: PyTorch's CompositeExplicitAutogradNonFunctional kernel
// allocates the output on flagos and calls the out= op. Ops with a CompositeExplicitAutograd
// kernel (abs, full, _to_copy) never reach it as themselves either: that kernel, written in
// other ops, runs for every backend without a kernel of its own. A kernel library that
// serves such an op itself (FlagGems serves aten::log and aten::abs, not their out= forms)
// needs the op to arrive as what it is. route_ops_as_themselves registers the routed fallback as the
// PrivateUse1 kernel of such ops, so that they go down their own route, whichever provider
// it names (the twin and the CPU fallback serve the functional form as well). A call that
// moves data to or from another device (x.cpu() is _to_copy(x, device=cpu); copy_ from the
// host) still takes the composite kernel: the routes serve ops on flagos memory. So does a
// call that no provider before the CPU fallback accepts: its parts are routed one by one.
//
// The hot ops with a fast kernel (fast_kernels.cpp) are not registered again: their fast
// kernel sends the op down its own route when that route starts with a foreign provider.
#pragma once

#include <string>
#include <vector>

namespace flagos {

// For each name ("aten::log", "aten::cos_.default", "aten::add.Tensor"), registers the
// routed fallback as its PrivateUse1 kernel when it has a CompositeExplicitAutograd(-
// NonFunctional) kernel and no PrivateUse1 kernel yet; returns the names registered now
// (an op registered before, or not of that kind, is skipped). Unknown names are skipped.
std::vector<std::string> route_ops_as_themselves(const std::vector<std::string>& names);
// Whether `name` ("aten::full", "aten::add.Tensor"; the key as registered) was registered
// by route_ops_as_themselves.
bool routed_as_itself(const std::string& name);

}  // namespace flagos
