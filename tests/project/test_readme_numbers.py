"""Every figure README.md and the docs/ pages it links to (real_models.md, comparing.md,
forecasting.md: sections moved out of the README) quote comes from a file in the repository
that a script writes, and these tests hold those pages to those files.

Each test names a paragraph of a page by its first words, renders from the results file the
fragments the paragraph must contain, and then checks that no other number is left in the
paragraph (`assert_quotes`): a figure typed by hand, or one left behind when its file
changed, fails here. Numbers that are settings rather than measurements (a model's name, a
config value) are listed per paragraph as `settings` and, where cheap, checked against the
config they come from. The headline table and its verdicts are checked in test_studies.py.

The README's own commands (the default job, `sgpo_paper`, the test tiers) are recorded by
`benchmarks/readme_commands.py` in `benchmarks/results/readme_commands/`; until a quiet
machine has written a target's file, its test is skipped and says which command writes it.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / 'README.md').read_text()
RESULTS = ROOT / 'benchmarks' / 'results'
sys.path.insert(0, str(ROOT / 'benchmarks'))
HEADLINE = ROOT / 'studies' / 'allocator_comparison' / 'headline'
NUMBER = re.compile(r'\d+(?:\.\d+)?(?:e[+-]?\d+)?')
CODE_OR_LINK = re.compile(r'`[^`]*`|\]\([^)]*\)')
# Sections moved out of the README to pages it links to; their figures are checked there.
REAL_MODELS = 'docs/real_models.md'
COMPARING = 'docs/comparing.md'
FORECASTING = 'docs/forecasting.md'


def paragraph(start: str, page: str = 'README.md') -> str:
  """The paragraph of `page` (a path from the repository root; up to the next blank line)
  that begins with `start`, its line breaks read as spaces."""
  text = README if page == 'README.md' else (ROOT / page).read_text()
  assert start in text, f'{page} has no paragraph starting {start!r}'
  begin = text.index(start)
  end = text.find('\n\n', begin)
  return ' '.join(text[begin:end if end >= 0 else None].split())


def assert_quotes(start: str, fragments: list[str], settings: tuple[str, ...] = (),
                  page: str = 'README.md') -> None:
  """The paragraph holds every fragment, and every number in it is inside a fragment, a
  listed setting, or a code span or link target (a command or a path)."""
  text = paragraph(start, page)
  for fragment in fragments:
    assert fragment in text, f'{page} paragraph {start!r} should say {fragment!r}:\n{text}'
  rest = text
  for known in sorted(set(fragments) | set(settings), key=len, reverse=True):
    rest = rest.replace(known, ' ')
  left = NUMBER.findall(CODE_OR_LINK.sub(' ', rest))
  assert not left, (f'{page} paragraph {start!r} quotes {left} from no checked source; quote '
                    f'them from a results file (and add them here) or remove them:\n{rest}')


def _json(path: Path) -> dict:
  return json.loads(path.read_text())


def _readme_command_file(target: str) -> dict:
  path = RESULTS / 'readme_commands' / f'{target}.json'
  if not path.exists():
    pytest.skip(f'{path.relative_to(ROOT)} is not written yet: run '
                f'`python benchmarks/readme_commands.py {target}` on a quiet machine')
  return _json(path)


def _e(x: float) -> str:
  return f'{x:.1e}'.replace('e+', 'e')  # 8.7e12


# --- the quick start ---------------------------------------------------------------------


def test_default_job_figures_are_its_result_file():
  default = _readme_command_file('default')
  paper = _readme_command_file('sgpo_paper')
  assert default['command'] == 'python -m sgpo_jax.main --config default --workdir runs/default'
  assert default['command'] in README
  assert_quotes('On a quiet 2-core CPU machine the run took',
                [f"the run took {default['seconds']:.0f} s wall"], settings=('2-core',))
  assert_quotes('result: held-out greedy accuracy', [default['result_line']])
  rows = []
  for name, run in (('default', default), ('sgpo_paper', paper)):
    s = run['summary']
    final = f"{s['eval_accuracy_final']:.1%}"
    rows.append(f"| `{name}` | {s['eval_accuracy_initial']:.1%} -> "
                + (f'**{final}**' if name == 'default' else final)
                + f" (± {100 * s['eval_accuracy_final_se']:.1f}) | {_e(s['flops_total'])} |")
  lower = 100 * (default['summary']['eval_accuracy_final'] - paper['summary']['eval_accuracy_final'])
  assert_quotes('| config | held-out greedy', rows + [
      f"{lower:.0f} points lower after the same {paper['summary']['steps']} steps"])


def test_test_tiers_are_their_result_file():
  tiers = _readme_command_file('tests')
  selected = sum(v for k, v in tiers.items()
                 if k in ('passed', 'failed', 'skipped', 'xfailed', 'xpassed', 'error'))
  assert_quotes('The test command runs the fast tier', [
      f"the fast tier, {selected} tests, in {tiers['pytest_seconds']:.0f} s",
      f"runs the other {tiers['deselected']}, the slow tier"], settings=('2-core',))


def test_readme_commands_reads_pytest_counts():
  import readme_commands
  counts = readme_commands.pytest_counts(
      '846 passed, 3 skipped, 142 deselected, 1 error in 234.12s (0:03:54)')
  assert counts == {'passed': 846, 'skipped': 3, 'deselected': 142, 'error': 1,
                    'pytest_seconds': 234.12}


def test_warm_start_and_job_shape_are_the_shipped_files_and_configs():
  from sgpo_jax.configs import default, sgpo_paper
  from sgpo_jax.rl import warm_start
  config, paper = default.get_config(), sgpo_paper.get_config()
  shipped = warm_start.shipped_file(warm_start.cache_key(config))
  sft = _json(Path(warm_start.shipped_info_file(shipped)))
  groups = lambda g: '{' + ', '.join(map(str, g)) + '}'  # noqa: E731
  assert_quotes('The run starts from a tiny policy', [
      f"{sft['steps']} SFT steps, {sft['seconds']:.0f} s on the machine that built the shipped one",
      f'trains {config.train.num_steps} RL steps',
      f"`sgpo_bayes` (G in {groups(config.sgpo_bayes.group_sizes)})",
      f'evaluates on {config.data.num_eval} held-out problems',
      f"profile k={paper.profile.num_samples}, G in {groups(paper.sgpo.group_sizes)}"])


# --- the real model ------------------------------------------------------------------------


def _real_model():
  from sgpo_jax import configs
  from sgpo_jax.config.args import load_config_module
  result = _json(ROOT / 'studies' / 'real_model' / 'result.json')
  config = load_config_module(configs.path('smollm2_135m_arith')).get_config()
  return result, config


def test_real_model_figures_are_its_result_file():
  result, config = _real_model()
  d1, d2 = (result['by_digits'][f'eval_accuracy_d{k}'] for k in (1, 2))
  first, last = result['trajectory'][0], result['trajectory'][-1]
  load = result['load_average_1min']
  assert result['config_changes'] == [] and load['max'] < 2.5  # one run, quiet throughout
  assert_quotes('SmolLM2-135M-Instruct (', [f"({result['params_total'] / 1e6:.1f}M parameters",
                                            f"learns {config.data.min_digits}-"
                                            f'{config.data.max_digits} digit addition'],
                settings=('SmolLM2-135M-Instruct', 'Apache-2.0', '2-core', 'Q4_1', 'float32',
                          'within 1e-3'))
  assert 'np.max(np.abs(got - want)) <= 1e-3' in (
      ROOT / 'tests' / 'pretrained' / 'test_fetch.py').read_text()
  assert_quotes('result: held-out greedy accuracy 26', [result['result_line']])
  assert_quotes('+21', [
      f"+{result['gain_points']:.1f} points (SE {result['gain_se_points']:.1f}) on "
      f"{result['num_eval']} held-out problems",
      f'1-digit sums {100 * d1[0]:.1f}% -> {100 * d1[1]:.1f}%, 2-digit {100 * d2[0]:.1f}% -> '
      f'{100 * d2[1]:.1f}%',
      f"LoRA rank {config.model.lora_rank} trains {result['trainable_params'] / 1e6:.1f}M of "
      f"the {result['params_total'] / 1e6:.1f}M weights",
      f"from ~{first['completion_len_mean']:.0f} tokens ({100 * first['truncated_fraction']:.0f}% "
      f"cut at {config.sampling.max_new_tokens}) to ~{last['completion_len_mean']:.0f}",
      f"{result['skipped_steps']} of the {result['rl_steps']} steps had no informative group",
      f"The {result['wall_seconds']:.0f} s wall ({result['wall_seconds'] / 60:.0f} min, within the hour",
      f"load {load['min']:.1f}-{load['max']:.1f} (median {load['median']:.1f}) sampled",
      f"a median of {result['step_seconds_median']:.0f} s per step", 'the two 512-problem evals'])


def test_real_model_settings_are_the_shipped_config():
  _, config = _real_model()
  assert_quotes('`python -m sgpo_jax.pretrained fetch', [
      f'temperature {config.sampling.temperature}',
      f'groups of {config.grpo.group_size} (GRPO, {config.train.rows_per_batch} rows a step)'],
      settings=("'What is 47 + 38?",))
  assert config.method == 'grpo'


def test_peer_speed_is_the_bench_real_model_file():
  lines = [json.loads(x) for x in (RESULTS / 'bench_real_model.jsonl').read_text().splitlines()]
  decode, split, trl = (next(x for x in lines if x['comparison'] == c)
                        for c in ('decode', 'split', 'trl'))
  assert len({x['commit'] for x in (decode, split, trl)}) == 1
  prereg = (ROOT / 'studies/allocator_comparison/real/PREREGISTERED.md').read_text()
  assert '**Seeds.** 200, 201, 202' in prereg and 'a ~9-hour sweep' in prereg
  assert_quotes('Speed against the peers on this CPU', [
      f"({decode['rows']} completions, G={decode['group']}, {decode['max_new']} new tokens",
      f"{decode['threads']} threads each; load average {decode['load_average_before'][0]:.1f} -> "
      f"{trl['load_average_after'][0]:.1f}",
      f"decode {decode['speedup']:.2f}x transformers'",
      f"GRPO step {trl['speedup']:.2f}x TRL's",
      f"({trl['ours_step_seconds']:.1f} s against {trl['trl_step_seconds']:.1f} s)",
      f"the {decode['target']:.1f}x and {trl['target']:.0f}x aimed for",
      f"our step is {100 * split['shares']['sample']:.0f}% sampling, "
      f"{100 * split['shares']['train']:.0f}% training, verification "
      f"~{100 * split['shares']['verify']:.0f}"],
      settings=('float32',))
  assert decode['dtype'] == 'float32' and decode['rank'] == 0  # full fine-tuning
  # The job's own shape: LoRA on both sides, its rows and token cap, one run of the script.
  job = [x for x in lines if (x['rank'], x['rows'], x['max_new']) == (16, 32, 64)]
  jd, js, jt = (next(x for x in reversed(job) if x['comparison'] == c)
                for c in ('decode', 'split', 'trl'))
  assert len({x['commit'] for x in (jd, js, jt)}) == 1 and jd['group'] == 4
  assert_quotes("At the job's own shape", [
      f"load average {jd['load_average_before'][0]:.1f} -> {jt['load_average_after'][0]:.1f}",
      f"decode {jd['speedup']:.2f}x transformers' ({jd['ours_tokens_per_s']:.1f} against "
      f"{jd['transformers_tokens_per_s']:.1f}",
      f"GRPO step {jt['speedup']:.2f}x TRL's ({jt['ours_step_seconds']:.1f} s against "
      f"{jt['trl_step_seconds']:.1f} s)",
      f"our step is {100 * js['shares']['sample']:.0f}% sampling and "
      f"{100 * js['shares']['train']:.0f}% training"],
      settings=('LoRA r16', '32 completions', 'G=4', '64 new tokens', '2 cores', 'a 2x',
                'float32'))
  tunix = [x for x in lines  # the shipped config's draw (lines before --draw have none)
           if x['comparison'] == 'tunix' and x.get('draw', 'gumbel') == 'gumbel'][-1]
  assert (tunix['rows'], tunix['max_new'], tunix['dtype']) == (16, 96, 'float32')
  assert tunix['tunix_logits_max_abs_diff'] <= 1e-3  # Tunix ran the same model
  assert_quotes('Decode against Tunix', [
      f"Tunix {tunix['tunix_version']}'s sampler",
      f"load {tunix['load_average_before'][0]:.1f} -> {tunix['load_average_after'][0]:.1f}",
      f"{tunix['speedup']:.2f}x, {tunix['ours_tokens_per_s']:.1f} against "
      f"{tunix['tunix_tokens_per_s']:.1f} tokens/s"], settings=('Llama3',))


# --- memory: the analytic table and the compiled dry run -------------------------------------


REAL_STUDY = ROOT / 'studies' / 'allocator_comparison' / 'real'
REAL_REQUIRED = ('dapo', 'dapo_g4', 'sgpo_bayes_g24')  # PREREGISTERED.md's three arms


def _ratio_text(r: dict) -> str:
  """'1.23x [0.98, 2.10]' as the README writes a FLOPs ratio ('inf' for an open end)."""
  if r['point'] is None:
    return 'never reaches'
  lo, hi = ('inf' if x is None else f'{x:.2f}' for x in r['ci95'])  # None in the file: +inf
  return f"{r['point']:.2f}x [{lo}, {hi}]"


def test_real_regime_verdict_waits_for_every_preregistered_seed():
  """Until compare.json holds seeds 200-202 of every required arm, the README says there is
  no verdict; once it does, the README states the pre-registered verdict from that file."""
  prereg = (REAL_STUDY / 'PREREGISTERED.md').read_text()
  assert '**Seeds.** 200, 201, 202' in prereg
  head = 'The `real` comparison regime'
  settings = ('seeds 200-202', 'DAPO at G=4')
  path = REAL_STUDY / 'compare.json'
  block = _json(path)['regimes']['real'] if path.exists() else {'arms': {}}
  complete = all(block['arms'].get(a, {}).get('seeds') == [200, 201, 202]
                 for a in REAL_REQUIRED)
  assert complete == block.get('complete', False)  # the analysis' own reading agrees
  if not complete:
    assert_quotes(head, ['pre-registered', 'no verdict yet'], settings=settings)
    return
  ours = block['arms']['sgpo_bayes_g24']['at_dapo_final']['ratio_vs_dapo']
  h2h = block['head_to_head']
  assert (h2h['arm'], h2h['control']) == ('sgpo_bayes_g24', 'dapo_g4')
  diff = h2h['final_accuracy_diff']
  pts = lambda x: f'{100 * x:+.2f}'  # noqa: E731
  saves = ours['ci95'][0] is None or ours['ci95'][0] > 1  # the rule; None = +inf
  assert_quotes(head, [
      f"DAPO's final accuracy ({100 * block['arms']['dapo']['final_accuracy']['mean']:.1f}%)",
      _ratio_text(ours), 'saves compute' if saves else 'does not save compute',
      h2h['verdict'], _ratio_text(h2h['flops_ratio_at_dapo_final']),
      f"{pts(diff['point'])} points [{pts(diff['ci95'][0])}, {pts(diff['ci95'][1])}]"],
      settings=settings)
  assert 'no verdict yet' not in paragraph(head)


def test_lora_memory_table_is_docs_lora_memory_which_its_script_writes():
  import lora_memory_table
  doc = (ROOT / 'docs' / 'lora_memory.md').read_text()
  assert lora_memory_table.table().strip() == doc.strip()
  totals = {}
  for line in doc.splitlines():
    cells = [c.strip() for c in line.strip('|').split('|')]
    if len(cells) == 8 and cells[0].startswith('Qwen2.5-'):
      totals.setdefault(cells[0].removeprefix('Qwen2.5-'), []).append(cells[-1])
  rows = [f"| {size} | {' | '.join(t)} |" for size, t in totals.items()]
  assert_quotes('| Qwen2.5 | full | LoRA', rows, settings=('Qwen2.5', 'int8', 'nf4'),
                page=REAL_MODELS)
  assert_quotes('`--config.model.lora_rank=16` trains', [
      f'at {lora_memory_table.ROWS} rows x {lora_memory_table.SEQ_LEN} tokens, '
      f'r={lora_memory_table.RANK}',
      'analytic, from the dry run\'s formulas, not compiled'],
      settings=('int8', 'nf4', 'to 1e-4', 'bf16'), page=REAL_MODELS)
  assert 'np.testing.assert_allclose(merged, ours, atol=1e-4, rtol=1e-4)' in (
      ROOT / 'tests' / 'model' / 'test_lora.py').read_text()


def test_t4_figures_are_the_compiled_view_of_the_committed_dry_run():
  """The notebook paragraph quotes the dry run's compiled view (its verdict), labelled as
  such, from the file benchmarks/dry_run_record.py wrote for the notebook's config."""
  from sgpo_jax import configs
  from sgpo_jax.config.args import load_config_module
  path = RESULTS / 'dry_run' / 'qwen2_5_0_5b_gsm8k_lora_t4.json'
  run = _json(path)
  assert (run['config'], run['config_arg'], run['device']) == ('qwen2_5_0_5b_gsm8k_lora', '',
                                                               't4')
  assert run['commit'] and len(run['load_average_before']) == 3
  assert all(m['fits'] for m in run['compiled'].values())
  config = load_config_module(configs.path('qwen2_5_0_5b_gsm8k_lora')).get_config()
  assert config.model.lora_rank == 16  # the notebook's config: rank=16
  rows = (ROOT / 'notebooks' / 'gsm8k_offline.jsonl').read_text().splitlines()
  compiled, model = run['compiled'], run['model']
  assert_quotes('[`notebooks/colab_qwen_gsm8k_lora.ipynb`]', [
      'compiled peak per device, the dry run\'s verdict, by XLA:CPU',
      f"sampler {compiled['sampler']['peak_gib']:.1f} and train step "
      f"{compiled['train_step']['peak_gib']:.1f} GiB of the T4's {run['usable_gib']:.2f} usable",
      f"({model['trainable'] / 1e6:.1f}M of {model['params_total'] / 1e6:.0f}M parameters)",
      f'{len(rows)} shipped rows'],
      settings=('Qwen2.5-0.5B-Instruct', 'Qwen2', 'T4', 'GSM8K'), page=REAL_MODELS)
  assert run['backend'] == 'cpu'


# --- the comparison ----------------------------------------------------------------------------


def _headline() -> dict:
  return _json(HEADLINE / 'compare.json')


def test_regimes_are_the_headline_file_and_the_histograms():
  from sgpo_jax.configs import regimes
  blocks = _headline()['regimes']
  hist = _json(ROOT / 'studies' / 'regime_histograms' / 'regime_histograms.json')['regimes']
  (eval_problems,) = {b['eval_problems'] for b in blocks.values()}
  (budget,) = {b['flops_budget'] for b in blocks.values()}
  (rows,) = {b['rows_per_batch'] for b in blocks.values()}
  assert_quotes('Regimes (`--config default:regime=NAME`)', [
      f'the same {eval_problems} held-out problems at the same '
      f'{len(regimes.REGIME_EVAL_FRACTIONS)} fractions of a {_e(budget)}-FLOPs budget',
      f'{rows} rows per step'], page=COMPARING)
  d, p, s = blocks['default'], blocks['paper_like'], blocks['small_pool']
  assert d['initial_accuracy'] == s['initial_accuracy']  # one warm start
  assert_quotes('| regime | initial policy | RL pool |', [
      f"the default run's warm start ({100 * d['initial_accuracy']:.1f}% on the "
      f'{eval_problems} problems) | first {d["rl_pool_size"]} queries',
      f"its own warm start ({100 * p['initial_accuracy']:.1f}%) | {p['rl_pool_size']} queries",
      f"{100 * hist['paper_like']['trivial_fraction']:.1f}% trivial, "
      f"{100 * hist['paper_like']['unsolved_fraction']:.1f}% unsolved",
      f"first {s['rl_pool_size']} queries"], settings=('1-4 digits',), page=COMPARING)
  assert hist['paper_like']['trivial_threshold'] == 0.75
  assert_quotes('Initial accuracies and pool sizes', ['(p̂ > 0.75)', '(p̂ = 0)'],
                page=COMPARING)


def test_headline_prose_is_the_headline_files():
  results = _headline()
  blocks = results['regimes']
  seeds = {r: b['seeds_planned'] for r, b in blocks.items()}
  arms = {a for b in blocks.values() for a in b['arms']}
  runs = sum(len(a['seeds']) for b in blocks.values() for a in b['arms'].values())
  span = lambda s: f'{min(s)}-{max(s)}'  # noqa: E731
  assert_quotes('The headline comparison runs the default path', [
      f"equal budget of {_e(blocks['default']['flops_budget'])} FLOPs per run",
      f"paper_like seeds {span(seeds['paper_like'])}, default and small_pool "
      f"{span(seeds['default'])}"])
  assert seeds['default'] == seeds['small_pool'] and len(arms) == 7
  assert 'Seven arms' in paragraph('The headline comparison runs the default path')
  wall = [w for b in blocks.values() for a in b['arms'].values()
          for w in a['wall_seconds']['per_seed']]
  assert len(wall) == runs
  assert_quotes('(140 runs,', [
      f'({runs} runs, {min(wall) / 60:.1f}-{max(wall) / 60:.1f} min each, median '
      f'{statistics.median(wall) / 60:.1f}, on 2 CPU cores'])
  assert 'frozen checkout a1c1753' in results['note']

  pairs = [b['head_to_head']['final_accuracy_diff'] for b in blocks.values()]
  diffs = [100 * x['point'] for x in pairs]
  paper = {r: b['arms']['sgpo']['ratio_vs_grpo'] for r, b in blocks.items()}
  greso = blocks['default']['arms']['greso']['at_dapo_final']['ratio_vs_dapo']['point']
  all_equal = []
  for regime in blocks:
    table = (HEADLINE / f'diagnostics_{regime}.md').read_text().splitlines()
    header = [c.strip() for c in table[4].strip('|').split('|')]
    row = next(line for line in table if line.startswith('| sgpo |'))
    cells = [c.strip() for c in row.strip('|').split('|')]
    all_equal.append(float(cells[header.index('all-equal trained on')].rstrip('%')))
  pct = lambda x: f'{int(x + 0.5)}'  # noqa: E731  (80.5 -> 81, as the README rounds)
  end = lambda x: '0' if x == 0 else f'{x:.2f}'  # noqa: E731  ('[0, 6.24]')
  ratio = lambda r: f"{r['point']:.2f}x [{end(r['ci95'][0])}, {end(r['ci95'][1])}]"  # noqa: E731
  assert all(x['ci95'][0] < 0 < x['ci95'][1] for x in pairs)  # 'every interval spanning 0'
  assert_quotes('**The recommended allocator saves compute', [
      f'(+{min(diffs):.1f} to +{max(diffs):.1f} points of final accuracy',
      f"against GRPO {ratio(paper['paper_like'])} in paper_like and "
      f"{ratio(paper['default'])} in default",
      f'{pct(min(all_equal))}-{pct(max(all_equal))}% of the groups it trains on',
      f'than DAPO ({greso:.2f}x)', 'seeds 60-64', 'G=4'],
      settings=('>= 2', 'above 1', 'reaches 0', 'spanning 0', '2-core'))
  assert 'ok = ci is not None and ci[0] is not None and ci[0] >= 2' in (
      HEADLINE / 'readme_table.py').read_text()
  assert 'seeds 60-64' in (ROOT / 'studies/allocator_comparison/README.md').read_text()



def test_select_verdict_is_the_select_study_file():
  blocks = _json(HEADLINE.parent / 'select' / 'compare.json')['regimes']
  paper = blocks['paper_like']
  h2h = paper['head_to_head']
  assert (h2h['arm'], h2h['control']) == ('sgpo_select', 'dapo_g4')
  go = {arm: paper['arms'][arm]['where_flops_go'] for arm in ('sgpo_select', 'dapo_g4')}
  ratio, diff = h2h['flops_ratio_at_dapo_final'], h2h['final_accuracy_diff']
  pts = lambda x: f'{100 * x:+.2f}'  # noqa: E731
  assert h2h['verdict'] == 'does not separate'
  assert blocks['small_pool']['head_to_head']['verdict'] == 'behind'
  assert_quotes('**Choosing what to sample before sampling', [
      f"{len(paper['arms']['sgpo_select']['seeds'])} seeds",
      f"({100 * go['sgpo_select']['all_equal_share']:.1f}% all-equal groups against "
      f"{100 * go['dapo_g4']['all_equal_share']:.1f}%",
      f"fills {100 * go['sgpo_select']['filled_share']:.0f}% of its batches against "
      f"{100 * go['dapo_g4']['filled_share']:.0f}%",
      f"{ratio['point']:.2f}x [{ratio['ci95'][0]:.2f}, {ratio['ci95'][1]:.2f}]",
      f"({pts(diff['point'])} points [{pts(diff['ci95'][0])}, {pts(diff['ci95'][1])}])",
      'behind in small_pool', *_select_real_fragments()], settings=('G=4',))


def _select_real_fragments() -> list[str]:
  """What the README says of the rule on the real model: its pre-registered seeds, the
  head-to-head verdict against DAPO at G=4 (select/real/compare.json, report_real.sh)."""
  real = _json(HEADLINE.parent / 'select' / 'real' / 'compare.json')['regimes']['real']
  assert real['complete'] and real['arms']['sgpo_select']['seeds'] == [200, 201, 202]
  h2h = real['head_to_head']
  assert (h2h['arm'], h2h['control']) == ('sgpo_select', 'dapo_g4')
  diff = h2h['final_accuracy_diff']
  pts = lambda x: f'{100 * x:+.2f}'  # noqa: E731
  said = {'does not separate': 'it does not separate either', 'behind': 'it is behind',
          'ahead': 'it is ahead'}[h2h['verdict']]
  return [said, f"{len(real['arms']['sgpo_select']['seeds'])} seeds; "
          f"{_ratio_text(h2h['flops_ratio_at_dapo_final'])}, {pts(diff['point'])} points "
          f"[{pts(diff['ci95'][0])}, {pts(diff['ci95'][1])}]"]

def test_tunix_speed_is_the_quiet_decode_file():
  run = _json(RESULTS / 'bench_tunix_decode_l4_quiet.json')
  loaded = [_json(RESULTS / f'bench_tunix_{shape}.json')[0]['load_average']
            for shape in ('fixed', 'long')]
  import bench_tunix_decode
  widths = bench_tunix_decode.QWEN3_0_6B
  head_mb = widths['vocab'] * widths['d'] * 4 / 1e6  # the tied head in float32
  assert_quotes('Speed against Tunix:', [
      f'load average {int(min(loaded))}-{int(max(loaded))}',
      f"Qwen3-0.6B widths ({run['layers']} layers, {run['rows']} rows; load "
      f"{run['load_average_before'][0]:.1f}-{run['load_average_after'][0]:.1f}) is "
      f"{run['decode_speedup_vs_tunix[gumbel]']:.2f}x, or "
      f"{run['decode_speedup_vs_tunix[blocked]']:.2f}x with",
      f'{head_mb:.0f} MB tied head', f"{round(widths['vocab'] / 1000)}k-way"],
      settings=('the 1.5x target',))


# --- the forecast ------------------------------------------------------------------------------


def _md_rows(path: Path) -> list[list[str]]:
  return [[c.replace('**', '').strip() for c in line.strip().strip('|').split('|')]
          for line in path.read_text().splitlines() if line.startswith('|')]


def test_forecast_figures_are_the_pooled_study():
  pooled = ROOT / 'studies/scaling_law/results/scaling_law_pooled/results.md'
  rows = _md_rows(pooled)
  acc = next(r for r in rows if r[:2] == ['eval_accuracy', 'all'])
  reward = next(r for r in rows if r[:2] == ['reward_mean', 'all'])
  stop = next(r for r in rows if r[0] == '`bound`, current, balanced')
  noise = next(r for r in _md_rows(ROOT / 'studies/scaling_law/results/'
                                   'scaling_law_reward_noise.md') if r[0] == 'reward_mean')
  text = pooled.read_text()
  assert 'The CLI from the first 30%' in text and 'worst <= 3' in text
  assert_quotes('`fit` forecasts a run', [
      'first 30% of steps', 'a 90% jackknife interval',
      f'On {acc[2]} held-out runs the mean error was {acc[5].split()[0]} '
      f'({acc[6].split()[0]} "stays where it is") and the intervals held {acc[7].split()[0]}',
      f'mean error {reward[5].split()[0]} against a seed-noise floor of {noise[5]}',
      f'saved {stop[2].split()[0]} of steps on {stop[1]} held-out runs but lost up to '
      f'{stop[4]} points (target 3)'], page=FORECASTING)
  assert_quotes('`python -m sgpo_jax.scaling_law fit RUN` forecasts',  # the README's summary
                ['first 30% of steps', 'a 90% interval'])
