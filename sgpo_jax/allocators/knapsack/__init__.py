"""Knapsack allocation: group sizes that maximise expected informative groups under a row budget (`solver.py`: the math and settings; `allocator.py`: the allocator)."""
