"""The policy network: the Flax transformer (`transformer.py`), HF import/export (`hf.py`), mesh and shardings (`sharding.py`), the FLOPs ledger (`flops.py`) and the memory dry run (`dry_run.py`)."""
