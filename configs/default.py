"""Embedded default: a ~0.8M-parameter policy on the package's own arithmetic task.

    python -m sgpo_jax.main --config configs/default.py --workdir /tmp/sgpo_default

The fields, their meaning and the arg-string variants live in `sgpo_jax/config/defaults.py`
(inside the package, so an installed copy and notebooks see the same defaults).
"""

from sgpo_jax.config.defaults import get_config  # noqa: F401
