"""sGPO: profile once, G from the success rate, filtering and curriculum (`allocation.py`: the math and settings; `allocator.py`: the allocator)."""
