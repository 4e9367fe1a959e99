"""Math reward: extraction, screening, equivalences, hard time bound, adversarial inputs."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgpo_jax.data.query import Query
from sgpo_jax.tasks import math_answer
from sgpo_jax.tasks.math_answer import extract_answer, screen_answer
from sgpo_jax.tasks.math_reward import MathVerifier

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
])
def test_screen_refuses(answer):
  assert screen_answer(answer) is not None


@pytest.mark.parametrize('answer', [
    '42', r'\frac{1}{2}', 'x^2+1', '2^{10}', '5!', r'\sqrt{2}', r'\{1,2\}', r'50\%', 'x != 3',
    '(' * 5 + '1' + ')' * 5, '2^{2023}', '(x+1)^{30}', r'\sqrt{\frac{\sqrt{2}}{2}}',
    '1+' * 79 + '1',
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
        runs.append(v.score([c for c, _, _ in HARD_PAIRS], [g for _, g, _ in HARD_PAIRS]).tolist())
        assert v.stats['timeouts'] == 0 and v.stats['screened'] == 2
  finally:
    for proc in busy:
      proc.kill()
      proc.wait()
  assert runs[0] == runs[1] == [float(r) for _, _, r in HARD_PAIRS]
