"""Math reward: extraction, screening, equivalences, hard time bound, adversarial inputs."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgpo_jax.tasks import math_answer
from sgpo_jax.tasks.math_answer import extract_answer, screen_answer
from sgpo_jax.tasks.math_reward import MathVerifier
from sgpo_jax.tasks.query import Query

# (completion, reference, expected reward)
CASES = [
    # integers and answer markers
    (r'\boxed{42}', '42', 1),
    ('The answer is 42.', '42', 1),
    ('#### 42', '42', 1),
    ('so 6*7 = 42\n#### 42', '42', 1),
    (r'\boxed{41}', '42', 0),
    (r'\boxed{-3}', '-3', 1),
    (r'\boxed{3}', '-3', 0),
    (r'\boxed{420}', '42', 0),
    ('The answer is 42', '42.0', 1),
    ('Answer: 7', '7', 1),
    # decimals
    (r'\boxed{0.5}', '0.5', 1),
    (r'\boxed{0.5}', '5', 0),
    (r'\boxed{5}', '0.5', 0),
    (r'\boxed{.5}', '0.5', 1),
    (r'\boxed{0.50}', '0.5', 1),
    (r'\boxed{10.0}', '10', 1),
    (r'\boxed{3.14}', '3.15', 0),
    (r'\boxed{2.5}', r'\frac{5}{2}', 1),
    (r'\boxed{5.}', '5', 1),
    (r'\boxed{1.5e3}', '1500', 1),
    # fractions
    (r'\boxed{\frac{1}{2}}', '1/2', 1),
    (r'\boxed{1/2}', '0.5', 1),
    (r'\boxed{1/2}', '2', 0),
    (r'\boxed{2}', '1/2', 0),
    (r'\boxed{\dfrac{3}{4}}', '0.75', 1),
    (r'\boxed{\frac12}', '0.5', 1),
    (r'\boxed{2/4}', r'\frac{1}{2}', 1),
    (r'\boxed{\frac{2}{3}}', r'\frac{3}{2}', 0),
    (r'\boxed{-\frac{1}{2}}', '-0.5', 1),
    (r'\boxed{\frac{1}{3}}', '0.33', 0),
    (r'the answer is $\frac{3}{4}$.', '0.75', 1),
    # percentages
    (r'\boxed{50\%}', '50', 1),
    ('The answer is 50%.', '50', 1),
    (r'\boxed{50\%}', '0.5', 1),
    (r'\boxed{40\%}', '50', 0),
    # thousands separators
    (r'\boxed{1,000}', '1000', 1),
    ('#### 1,234,567', '1234567', 1),
    ('The answer is 12,000.', '12000', 1),
    (r'\boxed{1,000}', '100', 0),
    (r'\boxed{1000}', '1,000', 1),
    # LaTeX
    (r'\boxed{\sqrt{2}}', r'\sqrt{2}', 1),
    (r'\boxed{2^{1/2}}', r'\sqrt{2}', 1),
    (r'\boxed{\frac{\sqrt{3}}{2}}', r'\frac{1}{2}\sqrt{3}', 1),
    (r'\boxed{\sqrt{3}}', r'\sqrt{2}', 0),
    (r'\boxed{2\pi}', r'\pi \cdot 2', 1),
    (r'\boxed{\frac{\pi}{2}}', r'\pi/2', 1),
    (r'\boxed{3.14159}', r'\pi', 0),
    (r'\boxed{\sqrt{4}}', '2', 1),
    (r'\boxed{\infty}', r'\infty', 1),
    (r'\boxed{\$10}', '10', 1),
    (r'\boxed{5\text{ cm}}', '5', 1),
    # expressions and equivalent forms
    (r'\boxed{x^2+1}', '1+x^2', 1),
    (r'\boxed{x+x}', '2x', 1),
    (r'\boxed{x+2}', 'x+1', 0),
    (r'\boxed{x = 5}', '5', 1),
    (r'\boxed{\{1,2\}}', r'\{2,1\}', 1),
    (r'\boxed{(1,2)}', '(1, 2)', 1),
    # boxed inside text, several boxes, unbalanced braces
    (r'We get \boxed{5} apples, so that is it.', '5', 1),
    (r'First \boxed{3}, wait, actually \boxed{5}', '5', 1),
    (r'First \boxed{5}, wait, actually \boxed{3}', '5', 0),
    (r'\boxed{5', '5', 0),
    (r'\boxed{\frac{1}{2}', '0.5', 0),
    (r'\boxed{{5}}', '5', 1),
    (r'$\boxed{5}$', '5', 1),
    (r'\fbox{7}', '7', 1),
    (r'\boxed 7', '7', 1),
    (r'\boxed{5}' + '\n#### 6', '5', 1),
    ('The answer is 4.\n#### 5', '5', 1),
    # no marker: the last number counts
    ('I think it is 12 or maybe 13', '13', 1),
    ('I think it is 12 or maybe 13', '12', 0),
    ('', '5', 0),
    ('no idea', '5', 0),
    # references that carry their own marker
    ('#### 12', r'\boxed{12}', 1),
    (r'\boxed{72}', 'She sells 16 - 3 - 4 = 9 eggs, 9 * 8 = 72.\n#### 72', 1),
    # control characters and adversarial answers
    ('\\boxed{5}\x00', '5', 1),
    ('\\boxed{5\x00}', '5', 1),
    (r'\boxed{9^{9^{9}}}', '1', 0),
    (r'\boxed{(10^{10})!}', '1', 0),
    # not one value: math-verify alone reads each as its last side and accepts it (issue 44)
    (r'\boxed{x = 41 = 42}', '42', 0),
    (r'\boxed{41 = 42}', '42', 0),
    (r'\boxed{6 \times 8 = 42}', '42', 0),
    (r'\boxed{41 \to 42}', '42', 0),
    (r'\boxed{41 \implies 42}', '42', 0),
    (r'\boxed{41 \Rightarrow 42}', '42', 0),
    (r'\boxed{41 => 42}', '42', 0),
    (r'\boxed{41 -> 42}', '42', 0),
    ('\\boxed{4\x002}', '42', 0),
    ('The answer is 4\x002', '42', 0),
    ('#### 4\x1f2', '42', 0),
    (r'\boxed{x = 42}', '42', 1),
    (r'\boxed{x \to \infty}', r'x \to \infty', 1),  # identical to the reference
    (r'\boxed{}', '', 0),
    (r'\boxed{x=1, y=2}', 'x=1, y=2', 1),
    (r'\boxed{1 < x \le 3}', r'1 < x \le 3', 1),
    # combinatorial functions: small arguments are answers, large ones are screened
    (r'\boxed{\binom{10}{3}}', '120', 1),
    (r'\boxed{{5 \choose 2}}', '10', 1),
    (r'\boxed{\Gamma(5)}', '24', 1),
    (r'\boxed{5!}', '120', 1),
    (r'\boxed{\binom{999999}{499999}}', '42', 0),
    (r'\boxed{\Gamma(10^{8})}', '42', 0),
    # numeric tolerance: exact against rational golds, 6 decimal places against others
    (r'\boxed{0.333333}', r'\frac{1}{3}', 0),
    (r'\boxed{0.3333333333333333}', '1/3', 0),
    (r'\boxed{\frac{2}{6}}', r'\frac{1}{3}', 1),
    (r'\boxed{\frac{0.333333}{1}}', r'\frac{1}{3}', 0),  # math-verify, float_rounding=15
    (r'\boxed{\frac{1}{3.0}}', r'\frac{1}{3}', 1),
    (r'\boxed{0.33}', '0.33', 1),
    (r'\boxed{\frac{1}{3}}', '0.333333', 0),
    (r'\boxed{1.414214}', r'\sqrt{2}', 1),  # math-verify's default: 6 decimal places
    (r'\boxed{1.4142}', r'\sqrt{2}', 0),
    (r'\boxed{3.141593}', r'\pi', 1),
]

ADVERSARIAL = [
    '9**9**9', r'\boxed{9**9**9}', r'\boxed{9^{9^{9}}}', '9^9^9', r'\boxed{(10^{10})!}',
    r'\boxed{' + r'\frac{' * 500 + '1' + '}{2}' * 500 + '}', r'\boxed{' + r'\frac{' * 500,
    r'\boxed{2^{99999999}}', r'\boxed{99999999!}', r'\boxed{\sum_{i=1}^{n} i}',
    r'\boxed{\int_0^1 x dx}', 'x' * 100_000, '7' * 100_000, r'\boxed{' * 20_000,
    '{' * 50_000 + '}' * 50_000, '\x00' * 1000, r'\boxed{\x00}', 'The answer is ' + '(' * 5000,
    r'\boxed{' + '1+' * 5000 + '1}', '#### ' + '9' * 10_000, r'\boxed{1e999}',
]


@pytest.fixture(scope='module')
def verifier():
  with MathVerifier(num_workers=2) as v:
    yield v


def test_case_table_has_enough_cases():
  assert len(CASES) >= 60


def test_case_table(verifier):
  completions, references, expected = zip(*CASES)
  rewards_N = verifier.score(list(completions), list(references))
  wrong = [(c, r, e, g) for c, r, e, g in zip(completions, references, expected, rewards_N)
           if g != e]
  assert not wrong


def test_case_table_without_fast_path_agrees():
  completions, references, expected = zip(*CASES)
  with MathVerifier(num_workers=2, use_fast_path=False) as slow:
    rewards_N = slow.score(list(completions), list(references))
  wrong = [(c, r, e, g) for c, r, e, g in zip(completions, references, expected, rewards_N)
           if g != e]
  assert not wrong


def test_inline_mode_agrees_on_a_sample():
  sample = CASES[::7]
  completions, references, expected = zip(*sample)
  inline = MathVerifier(num_workers=0)
  np.testing.assert_array_equal(inline.score(list(completions), list(references)), expected)


def test_call_takes_queries_and_dedupes(verifier):
  query = Query(id='q', prompt='Simplify 1+x.', answer='x+1')
  before = dict(verifier.stats)
  rewards_N = verifier([r'\boxed{1+x}'] * 8 + [r'\boxed{x+3}'], [query] * 9)
  assert rewards_N.dtype == np.float32
  np.testing.assert_array_equal(rewards_N, [1] * 8 + [0])
  assert verifier.stats['cached'] - before['cached'] == 7


@pytest.mark.parametrize('completion, expected', [
    (r'a \boxed{1} b \boxed{2} c', '2'),
    (r'\boxed{\frac{1}{2}} done', r'\frac{1}{2}'),
    (r'\boxed{5', None),
    ('#### 1,000\n', '1,000'),
    ('The answer is 3.5. Next line', '3.5'),
    ('the ANSWER is: 7', '7'),
    ('nothing here', None),
    ('x = 3, y = 4', '4'),
    ('It drops to \u22125', '-5'),  # a unicode minus is a minus, not a dropped sign
    ('1234567' + 'x' * 637, None),  # the last-number window never starts inside a number
    ('1234567' + 'x' * 500, '1234567'),
])
def test_extract_answer(completion, expected):
  assert extract_answer(completion) == expected


def test_extract_answer_without_fallback():
  assert extract_answer('x = 3', fallback='none') is None
  with pytest.raises(ValueError, match='fallback'):
    extract_answer('x', fallback='first')


@pytest.mark.parametrize('answer', [
    '9^{9^{9}}', '9**9**9', '9^9^9', '(10^{10})!', '2^{99999999}', '99999999!',
    r'\sum_{i=1}^{n} i', '(' * 20 + ')' * 20, 'x' * 300, '1}', '',
    '(' * 12 + '1' + ')' * 12, '(' * 6 + '1' + ')' * 6, '(x+1)^{999}', 'x^{100}', 'x**31',
    '(x+1)^{30}(x+2)^{31}', '1+' * 80 + '1',
    # issue 44: combinatorial and special-function blow-ups, huge integers
    r'\binom{999999}{499999}', r'\binom{200000}{100000}', r'\dbinom{1000}{2}', r'\binom{n!}{2}',
    r'\Gamma(10^{8})', r'\Gamma(100000)', r'\gamma(1000)', r'\Gamma\left(1000\right)',
    r'\Gamma(\Gamma(10))', '1000!', '(999)!', r'{1000 \choose 500}', r'{n! \choose 2}',
    '10^{10^{10}}', '10^(10^10)', r'2^{9999 \cdot 9999}', r'\sqrt{9999^{9999}}', '9^{9999}',
    '(999!)^{2}', r'999! \cdot 999!', r'\binom{999+999}{2}', '999!', '450!', '(99!)^{7}',
    r'\Gamma(451)', '9999^{251}',
    # issue 44: not one value
    'x = 41 = 42', '41 = 42', r'6 \times 8 = 42', r'x = 41 \le 42', r'41 \to 42',
    r'41 \implies 42', r'41 \Rightarrow 42', r'41 \rightarrow 42', r'x \iff y', '41 => 42',
    '41 -> 42', '41 \u2192 42', '4 2', '1 000', r'1 = 2 \text{ or } x = 5',
    r'\Gamma(99 \cdot 99 \cdot 99)', r'\Gamma({99}{99})', r'\Gamma(\frac{1999}{2})',
    # exponents behind layout math-verify reads through (its verdict hung on the timeouts)
    r'2^\left(99999999\right)-2^\left(99999999\right)+7', r'2^\,{999999999}',
    r'9^\left(9^{9}\right)', r'2 ** \; 99999', r'2^\frac{99999}{2}', r'9^\left(2999\right)',
])
def test_screen_refuses(answer):
  assert screen_answer(answer) is not None


@pytest.mark.parametrize('answer', [
    '42', r'\frac{1}{2}', 'x^2+1', '2^{10}', '5!', r'\sqrt{2}', r'\{1,2\}', r'50\%', 'x != 3',
    '(' * 5 + '1' + ')' * 5, '2^{2023}', '(x+1)^{30}', r'\sqrt{\frac{\sqrt{2}}{2}}',
    '1+' * 79 + '1',
    r'\binom{10}{3}', r'\dbinom{999}{499}', r'\binom{n}{k}', r'\binom{n+1}{2}', r'\Gamma(5)',
    r'\Gamma(x)', r'2\gamma + 1', '449!', r'{10 \choose 3}', '9999^{249}', '(99!)^{6}',
    r'\Gamma(450)', r'{999 \choose 499}',
    'x = 5', r'f(2) = 7', r'\theta = 30', 'x=1, y=2', r'1 < x \le 3', 'x <= -1', r'x \neq 3',
    'x<-1', r'\{1, 2\}', r'x=5 \text{ or } x=-5', r'\log_2 5', r'\frac{1}{2} = 0.5',
    r'\Gamma(\frac{1}{2})', r'e^\pi', r'2^\left(10\right)', r'x^\,2 + 1', r'1\,000',
])
def test_screen_admits(answer):
  assert screen_answer(answer) is None


def test_hard_timeout_kills_and_recovers():
  # Screening and soft timeouts off: only the watchdog can stop 9^{9^{9}}.
  with MathVerifier(num_workers=1, item_timeout_s=1.5, parse_timeout_s=0, verify_timeout_s=0,
                    screen=False) as v:
    v.score([r'\boxed{x+1}'], ['x+1'])  # worker started and warm
    start = time.monotonic()
    rewards_N = v.score([r'\boxed{1+x}', r'\boxed{9^{9^{9}}}', r'\boxed{x+1}', r'\boxed{x+2}'],
                        ['x+1'] * 4)
    elapsed = time.monotonic() - start
  np.testing.assert_array_equal(rewards_N, [1, 0, 1, 0])
  assert v.stats['timeouts'] == 1 and v.stats['restarts'] == 1
  assert elapsed < 30  # 1.5 s watchdog + a worker restart on a loaded 2-core machine


def _sympy_uses_gmpy() -> bool:
  from sympy.external.gmpy import GROUND_TYPES
  return GROUND_TYPES != 'python'


@pytest.mark.skipif(_sympy_uses_gmpy(), reason='sympy computes binomials with gmpy2 here, '
                    'in milliseconds: the unscreened binomial no longer reaches a 1 s timeout')
@pytest.mark.parametrize('num_workers', [0, 1])
def test_a_soft_timeout_is_counted_apart_from_a_wrong_answer(num_workers):
  # Unscreened, \binom{999999}{499999} takes math-verify's parse well past 1 s (the full 5 s
  # default, math_answer.py): its 1 s soft timeout fires and the check falls back to 0, the
  # value of a wrong answer; only the counter tells them apart. In a worker and in process.
  with MathVerifier(num_workers=num_workers, parse_timeout_s=1, verify_timeout_s=1,
                    item_timeout_s=30.0, screen=False) as v:
    rewards_N = v.score([r'\boxed{\binom{999999}{499999}}', r'\boxed{1+x}', r'\boxed{x+2}'],
                        ['42', 'x+1', 'x+1'])
  np.testing.assert_array_equal(rewards_N, [0, 1, 0])
  assert v.stats['soft_timeouts'] == 1  # the binomial; the wrong x+2 is not one
  assert v.stats['timeouts'] == 0 and v.stats['pool'] == 3


def test_rejects_fractional_soft_timeouts():
  with pytest.raises(ValueError, match='whole seconds'):
    MathVerifier(parse_timeout_s=0.5)


@pytest.mark.parametrize('completion', ADVERSARIAL)
def test_adversarial_inputs_are_fast_and_zero(verifier, completion):
  # CPU time of this process (extraction and screening run here), not wall time: a wall
  # bound failed at 3.1 s for an input that takes 0.01-0.08 s, on a 2-core machine running
  # sweeps beside the suite. What reaches the worker pool is bounded by math-verify's soft
  # timeouts and the watchdog; that it never needed the watchdog is checked on the stats.
  before = dict(verifier.stats)
  start = time.process_time()
  rewards_N = verifier.score([completion], ['1'])
  assert time.process_time() - start < 1.5
  assert rewards_N.tolist() == [0.0]
  assert verifier.stats['timeouts'] == before['timeouts']
  assert verifier.stats['restarts'] == before['restarts']
  assert verifier.stats['soft_timeouts'] == before['soft_timeouts']


_references = st.sampled_from(['1', '42', '0.5', r'\frac{1}{2}', r'\sqrt{2}', 'x+1', r'50\%'])
_pieces = st.one_of(
    st.text(max_size=200),
    st.sampled_from(ADVERSARIAL[:12] + ['\\boxed{', '}', '####', 'The answer is', '^{', '!',
                                        '\x00', '$', r'\frac{', '9', '**']),
)


@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(parts=st.lists(_pieces, max_size=6), reference=_references)
def test_random_and_adversarial_strings_never_raise_and_stay_fast(verifier, parts, reference):
  completion = ''.join(parts)
  start = time.monotonic()
  rewards_N = verifier.score([completion], [reference])
  assert time.monotonic() - start < 1.5
  assert rewards_N.shape == (1,) and rewards_N[0] in (0.0, 1.0)


@settings(max_examples=50, deadline=None)
@given(text=st.text(max_size=300))
def test_extraction_and_screening_never_raise(text):
  answer = extract_answer(text)
  if answer is not None:
    screen_answer(math_answer.normalize_answer(answer))
    math_answer.fast_verdict('1', math_answer.normalize_answer(answer))


# The slowest answers of each kind the screen admits, and two it must refuse (the issue's
# nesting-12 example, a degree-999 expansion); verdicts worked out by hand.
HARD_PAIRS = [
    ('The answer is ((((((((((((1))))))))))))', '1', 0),  # screened: nesting
    (r'\boxed{(x+1)^{999}}', 'x+1', 0),  # screened: symbolic power
    (r'\boxed{(((((1)))))}', '1', 1),
    ('The answer is {{{{{1}}}}}', '1', 1),
    (r'\boxed{(x+1)^{30}}', '(1+x)^{30}', 1),
    (r'\boxed{(x+1)^{30}}', '(1+x)^{29}', 0),
    (r'\boxed{(x+1)^{12}(x+2)^{12}}', '(x+2)^{12}(x+1)^{12}', 1),
    (r'\boxed{' + '1+' * 79 + '1}', '80', 1),
    (r'\boxed{' + 'x+' * 79 + 'x}', '80x', 1),
    (r'\boxed{' + 'x+' * 79 + 'x}', '81x', 0),
    (r'\boxed{2^{2023}}', '2^{2023}', 1),
    (r'\boxed{\sqrt{\frac{\sqrt{2}}{2}}}', r'\sqrt{\frac{1}{\sqrt{2}}}', 1),
    (r'\boxed{\binom{999999}{499999}}', '42', 0),  # screened: special function
    (r'\boxed{\sqrt{9999^{9999}}}', r'9999^{4999}\sqrt{9999}', 0),  # screened: huge integer
]


@pytest.mark.slow
def test_verdicts_do_not_depend_on_machine_load():
  """Same hard inputs, fresh (cold) workers, every core busy: the same verdicts each time."""
  busy = [subprocess.Popen([sys.executable, '-c', 'while True: pass'])
          for _ in range(os.cpu_count() or 1)]
  try:
    runs = []
    for _ in range(2):
      with MathVerifier(num_workers=1) as v:
        pairs = HARD_PAIRS + WORST_ADMITTED
        runs.append(v.score([c for c, _, _ in pairs], [g for _, g, _ in pairs]).tolist())
        assert v.stats['timeouts'] == 0 and v.stats['screened'] == 4
        assert v.stats['soft_timeouts'] == 0  # no verdict came from a time bound
  finally:
    for proc in busy:
      proc.kill()
      proc.wait()
  assert runs[0] == runs[1] == [float(r) for _, _, r in HARD_PAIRS + WORST_ADMITTED]


# The costliest answers of the kinds issue 44 added to the screen that it still admits (near
# MAX_INTEGER_DIGITS = 1000 digits), each against an equivalent gold (verdict 1: a soft
# timeout would score it 0, and stats['soft_timeouts'] counts one in any case).
WORST_ADMITTED = [
    (r'\boxed{9999^{124}\sqrt{9999}}', r'\sqrt{9999^{249}}', 1),  # ~1000 digits under a root
    (r'\boxed{\sqrt{9999^{249}}}', r'9999^{124}\sqrt{9999}', 1),
    (r'\boxed{\binom{999}{500}}', r'\binom{999}{499}', 1),
    (r'\boxed{{999 \choose 499}}', r'\binom{999}{500}', 1),
    (r'\boxed{\Gamma(450)}', '449!', 1),
    (r'\boxed{449 \cdot 448!}', r'\Gamma(450)', 1),
    (r'\boxed{\sqrt{448}\sqrt{447!}}', r'\sqrt{448!}', 1),
    (r'\boxed{\frac{3^{1000}}{2^{1000}}}', '1.5^{1000}', 1),
]


def test_one_groups_items_are_spread_over_the_workers():
  """One group's 16 completions share a reference. Routed by a hash of it they all queued on
  one worker (80 s for one score() in issue 44); dealt round robin, every worker gets some."""
  completions = [rf'\boxed{{x+{k}}}' for k in range(16)]
  with MathVerifier(num_workers=4) as v:
    rewards_N = v.score(completions, ['3+x'] * 16)
    started = sum(worker is not None for worker in v._workers)
  np.testing.assert_array_equal(rewards_N, [float(k == 3) for k in range(16)])
  assert v.stats['pool'] == 16 and started == 4


@pytest.mark.slow
def test_verdicts_agree_across_worker_counts_with_shortened_timeouts():
  """Everything the screen admits parses and verifies far inside the time bounds: with the
  soft timeouts cut from 5 s to 2 s and the watchdog from 20 s to 4 s, no watchdog fires, the
  worst admitted pairs still verify (a soft timeout would score them 0), and 1 worker and 3
  workers give the same verdicts, equal to the hand-worked ones."""
  table = CASES + HARD_PAIRS + WORST_ADMITTED
  completions, references, expected = (list(x) for x in zip(*table))
  runs = []
  for num_workers in (1, 3):
    with MathVerifier(num_workers=num_workers, parse_timeout_s=2, verify_timeout_s=2,
                      item_timeout_s=4.0) as v:
      runs.append(v.score(completions, references).tolist())
      assert v.stats['timeouts'] == 0 and v.stats['restarts'] == 0
      assert v.stats['soft_timeouts'] == 0
  wrong = [(c, r, e, g) for c, r, e, g in zip(completions, references, expected, runs[0])
           if g != e]
  assert not wrong
  assert runs[0] == runs[1]


@pytest.mark.parametrize('completion', [
    r'\boxed{\binom{999999}{499999}}', r'\boxed{\Gamma(10^{8})}', r'\boxed{\binom{200000}{100000}}',
    r'\boxed{10^{10^{10}}}', r'\boxed{\sqrt{9999^{9999}}}', r'\boxed{1000000!}',
    r'\boxed{{999999 \choose 499999}}'])
def test_issue_44_blowups_never_reach_a_worker(verifier, completion):
  before = dict(verifier.stats)
  assert verifier.score([completion], ['42']).tolist() == [0.0]
  assert verifier.stats['screened'] == before['screened'] + 1
  assert verifier.stats['pool'] == before['pool']


def test_only_a_parsed_gold_is_cached_in_the_worker():
  """An empty parse of the reference may be a parse timeout under load: it is not kept, so a
  later answer to that reference gets a fresh parse instead of string equality for good."""
  from sgpo_jax.tasks.math_worker import check_pair
  cache: dict = {}
  assert check_pair('x+1', '1+x', cache, None, None)
  assert 'x+1' in cache
  assert check_pair('', '', cache, None, None)  # nothing to parse: the identical string
  assert '' not in cache
