"""What a run writes: metrics and TensorBoard (`metrics.py`), the report (`report.py`), checkpoints (`checkpoint.py`) and the environment record (`environment.py`)."""
