"""Throughput of the math reward (`MathVerifier`) on RL-shaped batches.

    python benchmarks/bench_math_verify.py [--workers 2] [--batches 5]

A batch is 64 prompts x G=8 completions = 512 checks: ~500-character reasoning traces ending
in a boxed answer, drawn from correct, equivalent-form, wrong and adversarial variants, over
references that are integers (GSM8K-like), fractions, decimals and LaTeX expressions.
Prints checks/s for: the first batch (includes worker start-up), warm batches with the fast
path, warm batches with every pair sent to math-verify, and a worst case where all 512
answers are distinct symbolic expressions (no deduplication, no fast path possible).
"""

import argparse
import random
import time

from sgpo_jax.tasks.math_reward import MathVerifier

# reference -> (correct forms, wrong forms)
PROBLEMS = [
    ('72', ['72', '72.0', '\\$72'], ['71', '720', '7.2']),
    ('1,000', ['1000', '1,000'], ['100', '10000']),
    ('\\frac{1}{2}', ['0.5', '\\frac{1}{2}', '1/2', '\\dfrac{2}{4}'],
     ['2', '0.25', '\\frac{2}{1}']),
    ('\\sqrt{2}', ['\\sqrt{2}', '2^{1/2}'], ['2', '\\sqrt{3}']),
    ('\\frac{\\pi}{2}', ['\\frac{\\pi}{2}', '\\pi/2', '0.5\\pi'], ['\\pi', '2\\pi']),
    ('x^2+1', ['x^2+1', '1+x^2'], ['x^2-1', 'x+1']),
    ('50\\%', ['50\\%', '50', '0.5'], ['5', '40\\%']),
    ('-3', ['-3', '- 3'], ['3', '-2']),
    ('\\frac{3}{4}', ['0.75', '\\frac{6}{8}'], ['0.7', '\\frac{4}{3}']),
    ('(1,2)', ['(1,2)', '(1, 2)'], ['(2,1)', '(1,3)']),
]
ADVERSARIAL = ['9^{9^{9}}', '(10^{10})!', '\\frac{' * 200, '1' + '+1' * 3000]
FILLER = ('Let us think step by step. First we compute the quantity asked for, then we '
          'simplify the expression carefully and check the arithmetic twice. ')


def make_batch(rng: random.Random, num_prompts: int = 64, group_size: int = 8):
  completions, references = [], []
  for _ in range(num_prompts):
    reference, correct, wrong = rng.choice(PROBLEMS)
    for _ in range(group_size):
      u = rng.random()
      pool = correct if u < 0.5 else wrong if u < 0.97 else ADVERSARIAL
      answer = rng.choice(pool)
      completions.append(FILLER * 3 + f'So the answer is $\\boxed{{{answer}}}$.')
      references.append(reference)
  return completions, references


def make_unique_batch(rng: random.Random, size: int = 512):
  completions = [FILLER + f'\\boxed{{{rng.randint(1, 99)}x^2+{rng.randint(1, 10**6)}x}}'
                 for _ in range(size)]
  references = [f'{rng.randint(1, 99)}x^2+{rng.randint(1, 99)}x' for _ in range(size)]
  return completions, references


def run(num_workers: int, num_batches: int, use_fast_path: bool, seed: int = 0,
        unique: bool = False) -> None:
  rng = random.Random(seed)
  make = make_unique_batch if unique else make_batch
  batches = [make(rng) for _ in range(num_batches + 1)]
  with MathVerifier(num_workers=num_workers, use_fast_path=use_fast_path) as verifier:
    start = time.perf_counter()
    verifier.score(*batches[0])
    cold_s = time.perf_counter() - start
    start = time.perf_counter()
    total = 0
    for completions, references in batches[1:]:
      rewards = verifier.score(completions, references)
      total += len(rewards)
    warm_s = time.perf_counter() - start
    print(f'workers={num_workers} fast_path={use_fast_path} unique={unique}: '
          f'first batch of 512 {cold_s:.2f}s '
          f'(incl. start-up); warm {total / warm_s:,.0f} checks/s '
          f'({warm_s / num_batches * 1000:.0f} ms per 512); stats {verifier.stats}')


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workers', type=int, default=2)
  parser.add_argument('--batches', type=int, default=5)
  args = parser.parse_args()
  run(args.workers, args.batches, use_fast_path=True)
  run(args.workers, args.batches, use_fast_path=False)
  run(args.workers, 2, use_fast_path=True, unique=True)


if __name__ == '__main__':
  main()
