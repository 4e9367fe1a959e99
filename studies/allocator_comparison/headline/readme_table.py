"""The README's headline block, rendered from this folder's compare.json (never typed by hand):

  python -m studies.allocator_comparison.headline.readme_table [compare.json]

Prints the markdown: per arm and regime, final accuracy and FLOPs to DAPO's final accuracy as
a ratio vs DAPO with its 95% interval, then the pre-registered verdicts (PREREGISTERED.md):
does the recommended allocator save compute vs DAPO, does it separate from DAPO at G=4, does
the paper's sGPO reproduce the paper's saving vs GRPO. tests/project/test_studies.py checks that the
README holds exactly this text.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REGIMES = ('paper_like', 'default', 'small_pool')
NAMES = {'grpo': 'GRPO, G=8', 'dapo': 'DAPO', 'dapo_g4': 'DAPO, G=4', 'greso': 'GRESO',
         'knapsack': 'Knapsack RL', 'sgpo': "sGPO, the paper's settings",
         'sgpo_bayes_g24': '`sgpo_bayes`, G in {2, 4} (default)'}
RECOMMENDED, CONTROL, PAPER = 'sgpo_bayes_g24', 'dapo_g4', 'sgpo'


def _x(v: float | None) -> str:
  return 'inf' if v is None else f'{v:.2f}'


def _ratio(r: dict[str, Any] | None) -> str:
  if not r or r.get('point') is None:
    return 'n/a'
  if r['point'] == 0:
    return 'never'
  ci = r.get('ci95')
  return f"{r['point']:.2f}x" + (f' [{_x(ci[0])}, {_x(ci[1])}]' if ci else '')


def _cell(arm: dict[str, Any] | None, bold: bool) -> str:
  if arm is None:
    return 'not run'
  fa = arm['final_accuracy']
  acc = f"{100 * fa['mean']:.1f}"
  acc = f'**{acc}**' if bold else acc
  std = '' if fa.get('std') is None else f" ± {100 * fa['std']:.1f}"
  return f"{acc}{std}; {_ratio((arm.get('at_dapo_final') or {}).get('ratio_vs_dapo'))}"


def render(results: dict[str, Any]) -> str:
  regimes = [r for r in REGIMES if r in results['regimes']]
  blocks = {r: results['regimes'][r] for r in regimes}
  def seeds(r):
    planned = blocks[r].get('seeds_planned') or []
    done = min(len(a['seeds']) for a in blocks[r]['arms'].values())
    return (f'{len(planned)} seeds' if done >= len(planned)
            else f'PARTIAL: {done} of {len(planned)} seeds')
  lines = ['| arm | ' + ' | '.join(f'`{r}` ({seeds(r)})' for r in regimes) + ' |',
           '|---|' + '---|' * len(regimes)]
  arms = [a for a in NAMES if any(a in blocks[r]['arms'] for r in regimes)]
  for arm in arms:
    lines.append(f'| {NAMES[arm]} | ' + ' | '.join(
        _cell(blocks[r]['arms'].get(arm), arm == RECOMMENDED) for r in regimes) + ' |')
  lines += ['', "Cells: final held-out accuracy % (mean ± std over seeds); FLOPs to reach and "
            "hold DAPO's final accuracy, as a ratio vs DAPO (> 1: fewer FLOPs; 'never': the "
            'seed-mean curve does not get there) [95% bootstrap interval].', '']
  verdicts = []
  for r in regimes:
    a = blocks[r]['arms']
    learned = blocks[r].get('reference_learned', True)
    parts = []
    rec = (a.get(RECOMMENDED) or {}).get('at_dapo_final')
    if rec:
      ci = rec['ratio_vs_dapo']['ci95']
      # A None end in compare.json is +inf (undefined replicates are dropped, not None).
      saves = ci is not None and (ci[0] is None or ci[0] > 1)
      vs_grpo = (f"at GRPO's final accuracy {_ratio(a[RECOMMENDED].get('ratio_vs_grpo'))} vs "
                 'GRPO' if learned else "no ratio at GRPO's final accuracy")
      parts.append(f"`sgpo_bayes` {'saves' if saves else 'does not save'} compute vs DAPO "
                   f"({_ratio(rec['ratio_vs_dapo'])}; {vs_grpo})")
    pair = blocks[r].get('head_to_head')
    if pair:
      d = pair['final_accuracy_diff']
      ci = d['ci95'] or [None, None]
      parts.append(f"vs DAPO at G=4: {pair['verdict']} "
                   f"(final accuracy {100 * d['point']:+.2f} points "
                   f"[{100 * ci[0]:+.2f}, {100 * ci[1]:+.2f}], FLOPs to DAPO's final "
                   f"{_ratio(pair['flops_ratio_at_dapo_final'])})")
    paper = (a.get(PAPER) or {}).get('ratio_vs_grpo')
    if paper:
      ci = paper['ci95']
      ok = ci is not None and ci[0] is not None and ci[0] >= 2
      parts.append(f"the paper's sGPO {'reproduces' if ok else 'does not reproduce'} the "
                   f"paper's saving vs GRPO ({_ratio(paper)} at GRPO's final accuracy)")
    if not learned:  # the target is at or below the start: FLOPs to it say nothing
      b = blocks[r]
      parts.append(f"GRPO ended below its initial policy ({100 * b['initial_accuracy']:.1f}% "
                   f"-> {100 * b['target_accuracy']:.1f}%), so every ratio at GRPO's final "
                   'accuracy is void here')
    verdicts.append(f'- `{r}`: ' + '; '.join(parts) + '.')
  return '\n'.join(lines + verdicts)


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  path = argv[0] if argv else os.path.join(HERE, 'compare.json')
  with open(path) as f:
    print(render(json.load(f)))
  return 0


if __name__ == '__main__':
  sys.exit(main())
