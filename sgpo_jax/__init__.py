"""sgpo_jax: JAX/Flax RLVR with profile-sized GRPO groups (sGPO) and reward scaling laws."""

__version__ = '0.1.0'
