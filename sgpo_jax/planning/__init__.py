"""What a config will cost before any weights exist: the dry run (`dry_run.py`), compiling the run's own programs (`compiled_memory.py`) and comparing their peak memory with the device's."""
