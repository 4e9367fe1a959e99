"""The A/B harness: allocators compared at equal total FLOPs, per regime, with bootstrap
intervals over seeds (`python -m sgpo_jax.compare`).

arms.py     the arms (method + overrides), seeds, regimes, the run entries of a sweep
runner.py   one run at a time, resumable, under a per-run lock
analysis.py curves on a FLOPs grid, FLOPs to target, ratios and intervals -> compare.json
report.py   compare.json, compare.md and one plot per regime
diagnostics.py where each arm's FLOPs went (a companion table to compare.md)
sweep.py    the generic sweep (one run per override dict) and its sweep.md / sweep.csv table
same_run.py are two runs the same run (metrics equal up to timing fields)
"""
