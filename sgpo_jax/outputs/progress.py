"""The RL loop's progress bar: it counts what ends the run.

A run ends at `train.num_steps` or, with `train.flops_budget` > 0, once its cumulative FLOPs
(profiling included, held-out evals left out, as the stop rule counts them) reach the budget. The budgeted
regimes leave num_steps as a cap far above what the budget allows (100000), so a bar over
steps read 4/100000 with an ETA of weeks for a run that ends within the hour. With a budget
the bar counts the share of the run done, the larger of the step share and the budget share
(whichever ends the run reaches 100% first), and shows the step beside it.
"""

from __future__ import annotations

from typing import Any

from tqdm.auto import tqdm

# A share, not a count: the percentage of the run done (steps or budget), then the step.
_BUDGET_FORMAT = '{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}{postfix}]'


def done_share(step: int, num_steps: int, flops: float, flops_budget: float) -> float:
  """Share of the run done in [0, 1]: the larger of step / num_steps and flops / budget
  (budget <= 0: steps only)."""
  share = step / num_steps if num_steps > 0 else 0.0
  if flops_budget > 0:
    share = max(share, flops / flops_budget)
  return min(max(share, 0.0), 1.0)


class RunProgress:
  """tqdm over steps (no budget) or over the share of the run done (a budget); a context
  manager that closes the bar on any exit, so an error line starts on a line of its own."""

  def __init__(self, num_steps: int, flops_budget: float, step: int, flops: float,
               desc: str, disable: bool = False, file: Any = None):
    self.num_steps = int(num_steps)
    self.flops_budget = float(flops_budget)
    if self.flops_budget > 0:
      self.bar = tqdm(total=1.0, initial=done_share(step, self.num_steps, flops,
                                                    self.flops_budget),
                      desc=desc, disable=disable, file=file, bar_format=_BUDGET_FORMAT)
    else:
      self.bar = tqdm(total=self.num_steps, initial=step, desc=desc, disable=disable,
                      file=file)

  def advance(self, step: int, flops: float, **postfix: str) -> None:
    """The bar at `step` with `flops` spent, and its postfix (the step first, with a budget)."""
    if self.flops_budget > 0:
      self.bar.update(done_share(step, self.num_steps, flops, self.flops_budget) - self.bar.n)
      postfix = {'step': str(step), **postfix}
    else:
      self.bar.update(step - self.bar.n)
    self.bar.set_postfix(postfix)

  def __enter__(self) -> RunProgress:
    return self

  def __exit__(self, *exc: Any) -> None:
    self.bar.close()
