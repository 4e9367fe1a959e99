"""Known accelerators: memory, memory bandwidth and peak bf16 FLOP/s per chip.

The dry run compares compiled peak bytes with `usable_bytes` (of the present device, or of
`config.dry_run_device` when checking for another machine); the real-shape benchmark divides
measured speed by `hbm_bandwidth` (decode roofline) and `peak_bf16_flops` (MFU).

Numbers are the vendors' published per-chip figures (dense bf16, no sparsity). On GPUs jax
preallocates `XLA_PYTHON_CLIENT_MEM_FRACTION` (default 0.75) of memory and cannot use the
rest, so `usable_bytes` of a GPU entry applies that fraction.
"""

from __future__ import annotations

import dataclasses
import os

GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
  name: str
  hbm_bytes: int
  hbm_bandwidth: float  # bytes / s
  peak_bf16_flops: float  # FLOP / s, dense
  platform: str  # gpu | tpu | cpu
  kind_prefixes: tuple[str, ...] = ()  # jax `device_kind` strings that mean this device


DEVICES = {
    'h100-80gb': DeviceSpec('h100-80gb', 80 * GIB, 3.35e12, 989e12, 'gpu',
                            ('NVIDIA H100 80GB HBM3', 'NVIDIA H100 SXM', 'NVIDIA H100')),
    'h200': DeviceSpec('h200', 141 * 10**9, 4.8e12, 989e12, 'gpu', ('NVIDIA H200',)),
    # Colab's GPUs, memory as nvidia-smi shows it (ECC and driver reserve taken off). The T4
    # has no bf16 tensor cores (XLA runs bf16 through f32): its entry is the fp16 figure.
    't4': DeviceSpec('t4', 15360 * 1024**2, 320e9, 65e12, 'gpu', ('Tesla T4',)),
    'l4': DeviceSpec('l4', 23034 * 1024**2, 300e9, 121e12, 'gpu', ('NVIDIA L4',)),
    'v5e': DeviceSpec('v5e', 16 * GIB, 819e9, 197e12, 'tpu', ('TPU v5 lite', 'TPU v5e')),
    'v4': DeviceSpec('v4', 32 * GIB, 1.2e12, 275e12, 'tpu', ('TPU v4',)),
    'cpu': DeviceSpec('cpu', 0, 0.0, 0.0, 'cpu', ('cpu',)),
}


def spec(name: str) -> DeviceSpec:
  if name not in DEVICES:
    raise ValueError(f'config.dry_run_device={name!r}: choose one of {sorted(DEVICES)} or '
                     "'' for the device this runs on.")
  return DEVICES[name]


def spec_for_kind(device_kind: str) -> DeviceSpec | None:
  """The table entry whose kind prefix `device_kind` starts with (longest first), or None."""
  matches = [(len(p), s) for s in DEVICES.values() for p in s.kind_prefixes
             if device_kind.lower().startswith(p.lower())]
  return max(matches, key=lambda m: m[0])[1] if matches else None


def gpu_memory_fraction() -> float:
  return float(os.environ.get('XLA_PYTHON_CLIENT_MEM_FRACTION', '0.75'))


def host_memory_bytes() -> int:
  return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')


def usable_bytes(device_spec: DeviceSpec) -> int:
  """What one jax process may allocate on a device of this kind (see the module docstring)."""
  if device_spec.platform == 'cpu':
    return host_memory_bytes()
  if device_spec.platform == 'gpu':
    return int(device_spec.hbm_bytes * gpu_memory_fraction())
  return device_spec.hbm_bytes


def present_memory(device) -> tuple[str, int]:
  """(label, usable bytes) of a live jax device: its allocator's limit when it reports one."""
  stats = device.memory_stats() if hasattr(device, 'memory_stats') else None
  if stats and stats.get('bytes_limit'):
    return f'{device.device_kind} (allocator limit)', int(stats['bytes_limit'])
  known = spec_for_kind(device.device_kind)
  if known is not None and known.platform != 'cpu':
    return known.name, usable_bytes(known)
  return f'{device.device_kind} (host RAM)', host_memory_bytes()
