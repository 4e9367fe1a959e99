"""CLI of the A/B harness: `python -m sgpo_jax.compare {run,report,sweep,diagnose,same-run}`.

    python -m sgpo_jax.compare run --runs-dir runs/compare --results-dir runs/compare/results
    python -m sgpo_jax.compare run --regimes paper_like --arms dapo,sgpo_bayes_g24 --seeds 0-2
    python -m sgpo_jax.compare report --runs-dir runs/compare --results-dir runs/compare/results
    python -m sgpo_jax.compare run --smoke --runs-dir /tmp/c/runs --results-dir /tmp/c
    python -m sgpo_jax.compare sweep SWEEP.json --out runs/my_sweep
    python -m sgpo_jax.compare diagnose --runs-dir runs/compare --regime default --arms dapo
    python -m sgpo_jax.compare same-run WORKDIR_A WORKDIR_B

`run` is the protocol: every (seed, regime, arm) run, seed-major, one process at a time, into
RUNS_DIR/<regime>/<arm>_seed<s>. A run with summary.json is skipped and an unfinished one
resumes from its checkpoint, so a stopped sweep continues where it was. After each new run
the report is regenerated from the runs finished so far: RESULTS_DIR/compare.json,
compare.md and plots/compare_<regime>.png. `report` writes the same report from existing
runs without starting any. `diagnose` tabulates where each arm's FLOPs went.

Per regime and arm: target = mean over GRPO seeds of the final eval accuracy; FLOPs to
target (the seed-mean curve reaches it and holds it to the budget), with a bootstrap 95%
interval over seeds; ratio_vs_grpo / ratio_vs_dapo (> 1: the arm needs fewer FLOPs);
final accuracy (mean, std), AUC and wall-clock. Every run of a regime shares the warm start
and data seed: `seed` only changes the RL randomness.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

from sgpo_jax.compare import analysis, arms, diagnostics, report, runner, same_run, sweep

DEFAULT_RUNS_DIR = os.path.join('runs', 'compare')


def _add_protocol_args(parser: argparse.ArgumentParser) -> None:
  parser.add_argument('--regimes', default=','.join(arms.DEFAULT_REGIMES),
                      help='comma-separated regimes of the default config (default %(default)s)')
  parser.add_argument('--arms', default=','.join(arms.ARMS), help=f'from {list(arms.ARMS)}')
  parser.add_argument('--arm', action='append', default=[],
                      help="extra arm 'name=method,field=value,...' (repeatable)")
  parser.add_argument('--no-grpo', action='store_true',
                      help='do not add the GRPO reference arm: the report measures against '
                           "DAPO's final accuracy (needs dapo among --arms; GRPO runs listed in "
                           '--arms are reported beside it, never as the reference)')
  parser.add_argument('--required', default=None,
                      help='comma-separated arms a regime needs at every planned seed to be '
                           'complete (default: every chosen arm); the others are reported with '
                           'what has finished')
  parser.add_argument('--seeds', default='0-4', help="'0-4' or '0,1,2' (default %(default)s)")
  parser.add_argument('--regime-seeds', action='append', default=[],
                      help="other seeds for one regime 'REGIME=SPEC', e.g. paper_like=100-109 "
                           '(repeatable; the other regimes get --seeds)')
  parser.add_argument('--headline', default=f'{analysis.HEADLINE_REGIME}/{analysis.HEADLINE_ARM}',
                      help="'REGIME/ARM' repeated at the top of compare.json (default %(default)s)")
  parser.add_argument('--head-to-head', default=','.join(analysis.HEAD_TO_HEAD),
                      help="'ARM,CONTROL' compared per regime on final accuracy and FLOPs at "
                           "DAPO's final accuracy (default %(default)s)")
  parser.add_argument('--runs-dir', default=DEFAULT_RUNS_DIR,
                      help='the runs folder, shared by sweeps (default %(default)s)')
  parser.add_argument('--results-dir', default=None,
                      help='where compare.json, compare.md and plots/ go '
                           '(default RUNS_DIR/results)')
  parser.add_argument('--bootstrap', type=int, default=analysis.BOOTSTRAP,
                      help='bootstrap resamples per interval (default %(default)s)')
  parser.add_argument('--note', default='', help='a paragraph printed under the title')
  parser.add_argument('--smoke', action='store_true',
                      help='tiny model, regime smoke, seed 0, a few steps (a check, not a result)')


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog='python -m sgpo_jax.compare',
      description='The A/B harness: allocators compared at equal total FLOPs.\n\n'
                  + __doc__.split('\n', 2)[2],
      epilog="Run `python -m sgpo_jax.compare COMMAND --help` for a command's options.",
      formatter_class=argparse.RawDescriptionHelpFormatter)
  commands = parser.add_subparsers(dest='command', required=True)
  run = commands.add_parser(
      'run', help='run (or resume) the comparison sweep, then write its report',
      description='Runs every (seed, regime, arm), skipping finished runs and resuming '
                  'unfinished ones, and regenerates the report after each new run.')
  _add_protocol_args(run)
  run.add_argument('--set', action='append', default=[],
                   help="override for every run 'field=value' (repeatable)")
  run.add_argument('--code-dir', default=sweep.REPO,
                   help='checkout the runs execute (a frozen copy keeps a sweep stable; '
                        'default: this checkout)')
  run.add_argument('--cache-dir', default=None,
                   help='shared warm-start cache (default RUNS_DIR/warm_start)')
  rep = commands.add_parser(
      'report', help='write compare.json, compare.md and plots from finished runs (no runs)')
  _add_protocol_args(rep)
  sw = commands.add_parser(
      'sweep', help='generic sweep: one run per override dict, collected into sweep.md/.csv')
  sw.add_argument('sweep', help='JSON list of override dicts, or a .py defining SWEEP')
  sw.add_argument('--out', required=True, help='folder for the runs and the table')
  sw.add_argument('--config', default=sweep.DEFAULT_CONFIG)
  diag = commands.add_parser(
      'diagnose', help="where each arm's FLOPs went (shares, rounds, all-equal groups, padding)")
  diag.add_argument('--runs-dir', required=True)
  diag.add_argument('--regime', required=True)
  diag.add_argument('--arms', required=True, help='comma-separated run-name prefixes')
  diag.add_argument('--seeds', default='0-4', help="'0-4' or '0,1,2' (default %(default)s)")
  diag.add_argument('--out', default=None, help='markdown file (default: stdout)')
  same = commands.add_parser(
      'same-run', help='are two runs the same run? (metrics equal up to timing fields; '
                       'exit 0 when identical)')
  same.add_argument('workdir_a')
  same.add_argument('workdir_b')
  return parser


def _selected_arms(parser: argparse.ArgumentParser, args: argparse.Namespace
                   ) -> dict[str, tuple[str, dict[str, Any]]]:
  names = [a for a in args.arms.split(',') if a]
  unknown = [a for a in names if a not in arms.ARMS]
  if unknown:
    parser.error(f'--arms: unknown {unknown}; known {list(arms.ARMS)} (or add one with --arm)')
  chosen = {a: arms.ARMS[a] for a in names}
  for spec in args.arm:
    if '=' not in spec:
      parser.error(f"--arm {spec!r}: expected 'name=method,field=value,...'")
    chosen.update([arms.parse_arm(spec)])
  if getattr(args, 'no_grpo', False):
    if 'dapo' not in chosen:
      parser.error('--no-grpo: the report then needs dapo among --arms as its reference; '
                   f'got {list(chosen)}')
    return chosen
  if 'grpo' not in chosen:
    chosen = {'grpo': arms.ARMS['grpo'], **chosen}  # the reference every regime needs
  return chosen


def _regime_seeds(parser: argparse.ArgumentParser, args: argparse.Namespace,
                  regimes: list[str]) -> dict[str, list[int]]:
  out = {}
  for spec in args.regime_seeds:
    regime, _, seeds = spec.partition('=')
    if regime not in regimes or not seeds:
      parser.error(f"--regime-seeds {spec!r}: expected 'REGIME=SPEC' with REGIME one of "
                   f'--regimes {regimes}, e.g. {regimes[0]}=100-109')
    out[regime] = arms.parse_seeds(seeds)
  return out


def _pair(parser: argparse.ArgumentParser, value: str, sep: str, flag: str,
          example: str) -> tuple[str, str]:
  parts = value.split(sep)
  if len(parts) != 2 or not all(parts):
    parser.error(f'{flag} {value!r}: expected two names joined by {sep!r}, e.g. {example}')
  return parts[0], parts[1]


def run_protocol(parser: argparse.ArgumentParser, args: argparse.Namespace,
                 argv: Sequence[str]) -> int:
  chosen = _selected_arms(parser, args)
  regimes = [arms.SMOKE_REGIME] if args.smoke else [r for r in args.regimes.split(',') if r]
  seeds = [0] if args.smoke else arms.parse_seeds(args.seeds)
  regime_seeds = {} if args.smoke else _regime_seeds(parser, args, regimes)
  headline = _pair(parser, args.headline, '/', '--headline', 'paper_like/sgpo_bayes_g24')
  pair = _pair(parser, args.head_to_head, ',', '--head-to-head', 'sgpo_bayes_g24,dapo_g4')
  required = None if args.required is None else [a for a in args.required.split(',') if a]
  if required is not None and not set(required) <= set(chosen):
    parser.error(f'--required {args.required!r}: every required arm must be among the chosen '
                 f'arms {list(chosen)}')
  results_dir = args.results_dir or os.path.join(args.runs_dir, 'results')
  command = ' '.join(['python -m sgpo_jax.compare', *argv])
  log = lambda m: print(m, flush=True)  # noqa: E731

  def write_report() -> None:
    results = analysis.analyse(args.runs_dir, regimes, list(chosen), seeds, command,
                               args.bootstrap, regime_seeds, headline, pair,
                               reference='dapo' if args.no_grpo else None, required=required)
    results['note'] = args.note
    if results['regimes']:
      report.write_results(results, results_dir)

  if args.command == 'run':
    extra: dict[str, Any] = dict(arms.SMOKE_OVERRIDES) if args.smoke else {}
    extra['warm_start.cache_dir'] = args.cache_dir or os.path.join(args.runs_dir, 'warm_start')
    for kv in args.set:
      if '=' not in kv:
        parser.error(f"--set {kv!r}: expected 'field=value', e.g. train.num_steps=80")
      k, v = kv.split('=', 1)
      extra[k] = arms._parse_value(v)
    failed = []
    for entry in arms.run_entries(regimes, chosen, seeds, extra, regime_seeds):
      done_before = os.path.exists(os.path.join(args.runs_dir, entry['regime'],
                                                entry['name'], 'summary.json'))
      ok = runner.run_one(entry, args.runs_dir, args.code_dir, log)
      if ok is None:  # another sweep process has it
        continue
      if not ok:
        failed.append(f"{entry['regime']}/{entry['name']}")
        continue
      if not done_before:
        write_report()
    if failed:
      log(f'[compare] failed runs (see their stdout.log): {failed}')
  write_report()
  md = os.path.join(results_dir, 'compare.md')
  if not os.path.exists(md):
    print(f'[compare] no finished GRPO or DAPO run under {args.runs_dir} for {regimes}: '
          'no report', file=sys.stderr)
    return 1
  print(open(md).read())
  return 0


def run_sweep(args: argparse.Namespace) -> int:
  rows = sweep.run_sweep(sweep.load_sweep(args.sweep), args.out, args.config)
  print(open(os.path.join(args.out, 'sweep.md')).read())
  print(f'{len(rows)} runs collected into {args.out}/sweep.md and sweep.csv')
  return 0


def run_same(args: argparse.Namespace) -> int:
  for path in (args.workdir_a, args.workdir_b):
    if not os.path.isdir(path):
      raise SystemExit(f'same-run: {path} is not a folder; pass two run workdirs')
  result = same_run.compare_workdirs(args.workdir_a, args.workdir_b)
  if not result:
    raise SystemExit(f'same-run: {args.workdir_a} has no metrics.jsonl or profile.jsonl')
  same = True
  for name, diffs in result.items():
    rows = len(same_run.read_jsonl(os.path.join(args.workdir_a, name)))
    if diffs:
      same = False
      print(f'{name}: DIFFERENT')
      for line in diffs:
        print('  ' + line)
    else:
      print(f'{name}: identical ({rows} rows; ignoring {sorted(same_run.TIMING_FIELDS)})')
  return 0 if same else 1


def run_diagnose(args: argparse.Namespace) -> int:
  text = diagnostics.diagnose(args.runs_dir, args.regime,
                              [a for a in args.arms.split(',') if a], args.seeds)
  if args.out:
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w') as f:
      f.write(text)
  else:
    print(text)
  return 0


def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  parser = build_parser()
  args = parser.parse_args(argv)
  if args.command in ('run', 'report'):
    return run_protocol(parser, args, argv)
  if args.command == 'sweep':
    return run_sweep(args)
  if args.command == 'diagnose':
    return run_diagnose(args)
  return run_same(args)


if __name__ == '__main__':
  sys.exit(main())
