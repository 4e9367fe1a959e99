"""sgpo_bayes: a Beta posterior per prompt picks G and which prompts to roll out (`posterior.py`: the math; `allocator.py`: the allocator and its settings)."""
