"""Training and eval queries: loading from jsonl/parquet/TFDS/HF (`loading.py`) as `tasks.Query` records, tokenizers (`tokenizer.py`), and the input-path checks run before compute (`inputs.py`)."""
