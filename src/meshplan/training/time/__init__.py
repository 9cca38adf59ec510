"""Step time of a training plan: per layer, per micro-batch, per step.

- context.py         what the cost functions share for one plan (constants, groups, profile)
- constants.py       the training engines' overlap and overhead constants (fitted ones too)
- kernels.py         the host floor of a layer: ops dispatched x host time per op
- layer.py           forward and backward time of one decoder layer
- step.py            per-stage work of a micro-batch, data-parallel and optimizer time
- offload.py         CPU optimizer offload: host time added to a step
- offload_copies.py  host<->GPU copies inside the passes of offloaded plans
"""
