"""Settings: the embedded defaults (`defaults.py`), typed config-file arguments (`args.py`) and the checks every config passes before compute (`check.py`)."""
