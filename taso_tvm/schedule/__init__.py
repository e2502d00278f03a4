"""CPU schedules for TVM builds on llvm targets, dlight-style: after LegalizeOps, FuseOps and FuseTIR, every
PrimFunc gets a schedule by rule (contraction: conv2d, matmul, pooling; row reduction: softmax, layer norm,
mean; injective: element-wise and layout ops; a logged fallback for the rest).

    import taso_tvm.schedule                      # registers the "taso-schedule" Relax pipeline
    ex = tvm.compile(mod, target, relax_pipeline="taso-schedule")

`taso_tvm.schedule.tune` adds MetaSchedule tuning on top (`taso-tvm compile --tune`; needs `taso-tvm[tune]`).

The package reads TIR only; it imports nothing from the search, the rules or the faces.
"""
from .apply import FALLBACK, RULES, CpuSchedule, ScheduleReport, schedule_func
from .pipeline import PIPELINE_NAME, schedule_module, schedule_passes, schedule_pipeline
from .target import SCHEDULE_VERSION, host_mcpu, with_host_cpu
from .threads import num_threads, physical_cores, request_threads, set_num_threads

__all__ = ["CpuSchedule", "ScheduleReport", "schedule_func", "RULES", "FALLBACK", "PIPELINE_NAME",
           "schedule_module", "schedule_passes", "schedule_pipeline", "set_num_threads", "num_threads", "physical_cores", "request_threads",
           "SCHEDULE_VERSION", "host_mcpu", "with_host_cpu"]
