"""flagos.tuning: route autotuning. Measure every op of a workload on every installed
provider, on the device, check the results against the CPU, and write a routing file that
sends each op to its fastest correct provider (docs/tuning.md).

    with flagos.tuning.record("my-model") as rec:      # a workload from a model
        step()
    result = flagos.tuning.tune(rec.workload)
    flagos.tuning.write_routes(result, "routes.toml")  # FLAGOS_ROUTES_FILE=routes.toml

``python -m flagos tune`` does the same from the command line.
"""

from __future__ import annotations

from .hot_ops import hot_ops
from .recorder import Recorder, record
from .routes_file import format_routes, write_routes
from .timing import Timing, time_call
from .tuner import CallResult, OpChoice, ProviderRun, TuneResult, candidate_providers, tune
from .workload import OpCall, Workload

__all__ = ["CallResult", "OpCall", "OpChoice", "ProviderRun", "Recorder", "Timing",
           "TuneResult", "Workload", "candidate_providers", "format_routes", "hot_ops",
           "record", "time_call", "tune", "write_routes"]
