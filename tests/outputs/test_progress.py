"""The RL loop's progress bar counts what ends the run (sgpo_jax/outputs/progress.py)."""

import io

import pytest

from sgpo_jax.outputs.progress import RunProgress, done_share


@pytest.mark.parametrize('step, num_steps, flops, budget, share', [
    (3, 12, 0.0, 0.0, 0.25),  # no budget: steps only
    (4, 100000, 2.5e13, 1e14, 0.25),  # the budget ends the run: its share, not 4e-5
    (30, 40, 2.5e13, 1e14, 0.75),  # num_steps ends it first: the larger share
    (5, 100000, 1.2e14, 1e14, 1.0),  # over budget (the last step's overshoot): capped
])
def test_done_share_is_the_larger_of_the_two_stops(step, num_steps, flops, budget, share):
  assert done_share(step, num_steps, flops, budget) == pytest.approx(share)


def test_a_budgeted_bar_reads_the_budget_share_and_the_step():
  out = io.StringIO()
  with RunProgress(100000, 1e14, step=2, flops=1e13, desc='RL (dapo)', file=out) as bar:
    assert bar.bar.n == pytest.approx(0.1)  # a resumed run starts where it was
    bar.advance(4, 2.5e13, acc='0.266')
    assert bar.bar.n == pytest.approx(0.25)
  text = out.getvalue()
  assert ' 25%|' in text and 'step=4, acc=0.266' in text
  assert '100000' not in text  # the cap no budgeted run reaches is not shown


def test_an_unbudgeted_bar_counts_steps():
  out = io.StringIO()
  with RunProgress(300, 0.0, step=0, flops=0.0, desc='RL (grpo)', file=out) as bar:
    bar.advance(1, 1e9, reward='0.50')
    bar.advance(2, 2e9, reward='0.55')
  assert bar.bar.n == 2
  assert '2/300' in out.getvalue() and 'reward=0.55' in out.getvalue()
