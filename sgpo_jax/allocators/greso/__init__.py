"""GRESO: skip prompts whose recent groups were all-equal (`rule.py`: the skip rule and its settings; `allocator.py`: the allocator)."""
