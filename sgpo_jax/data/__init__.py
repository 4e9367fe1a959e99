"""Training and eval queries: loading from jsonl/parquet/TFDS/HF (`loading.py`), the `Query` record (`query.py`) and tokenizers (`tokenizer.py`)."""
