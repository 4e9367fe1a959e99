"""The machines a run spreads over: the device mesh and shardings (`sharding.py`), what each process does apart (`processes.py`) and the table of known accelerators (`devices.py`)."""
