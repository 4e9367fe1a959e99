"""What machine and libraries produced a result: recorded with every warm start and run.

Float results are reproducible bit for bit on one machine type with one set of library
versions, not across them: XLA:CPU picks its kernels (vector width, matmul libraries) from
the host CPU, so two machines round differently and a long SFT warm start drifts apart. The
same config built the `default` regime's warm start to a final SFT loss of 0.249 on one
machine and 0.312 on another (held-out accuracy 64.6% vs 55.2%). `describe()` is written into
the warm start's info.json and summary.json's `environment`, so a comparison can tell runs
of different initial policies apart (`python -m sgpo_jax.compare` leaves them out).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from typing import Any

import jax

_PACKAGES = ('jax', 'jaxlib', 'flax', 'optax', 'numpy', 'orbax-checkpoint')
# CPU features that change which kernels XLA:CPU runs (and so the rounding).
_CPU_FEATURES = ('avx2', 'avx512f', 'avx512_bf16', 'avx512_vnni', 'amx_tile', 'fma', 'neon',
                 'asimd', 'sve')


def _version(package: str) -> str | None:
  try:
    return importlib.metadata.version(package)
  except importlib.metadata.PackageNotFoundError:
    return None


def cpu_info(cpuinfo_path: str = '/proc/cpuinfo') -> dict[str, Any]:
  """{'model': CPU model name, 'features': the ones in _CPU_FEATURES it has}."""
  model, flags = platform.processor() or platform.machine(), set()
  try:
    with open(cpuinfo_path) as f:
      for line in f:
        key, _, value = line.partition(':')
        key = key.strip().lower()
        if key in ('model name', 'cpu model') and value.strip():
          model = value.strip()
        elif key in ('flags', 'features'):
          flags.update(value.split())
  except OSError:
    pass
  return {'model': model, 'features': sorted(f for f in _CPU_FEATURES if f in flags)}


def describe() -> dict[str, Any]:
  """JSON-ready: library versions, Python, CPU model and features, XLA_FLAGS, jax backend."""
  devices = jax.devices()
  return {
      'python': platform.python_version(),
      'packages': {p: _version(p) for p in _PACKAGES},
      'cpu': cpu_info(),
      'xla_flags': os.environ.get('XLA_FLAGS', ''),
      'backend': jax.default_backend(),
      'devices': f'{len(devices)} x {devices[0].device_kind}' if devices else '',
  }
