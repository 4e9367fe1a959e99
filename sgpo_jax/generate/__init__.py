"""Sampling from the policy: the static (`sampler.py`) and continuous-batching (`continuous.py`) samplers, held-out evaluation (`evaluate.py`) and the sGPO difficulty profile (`profiling.py`)."""
