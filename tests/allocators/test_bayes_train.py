"""method=sgpo_bayes through the main job: profile/probe FLOPs in the ledger, SIGKILL-resume."""

import json
import signal

import pytest

from tests import test_train
from tests.test_train import read_jsonl

# profile=True (not the default) so the run has probe rounds as well as refill rounds; the
# pooled prior over the queries' difficulty and the prioritised window (not the default
# either) so the trainer's strata reach the allocator and resume exactly with them.
BAYES_ARGS = ('--config.method=sgpo_bayes', '--config.sgpo_bayes.window=4',
              '--config.sgpo_bayes.profile=True',
              '--config.sgpo_bayes.pooled_prior=difficulty',
              '--config.sgpo_bayes.prioritise=True')


def _run_main(workdir, kill_after_step=None, steps=6):
  return test_train._run_main(workdir, kill_after_step, steps, method_args=BAYES_ARGS)


@pytest.mark.slow
def test_sgpo_bayes_ledger_counts_probes_and_sigkill_resume_is_exact(tmp_path):
  full = _run_main(str(tmp_path / 'full'))
  assert full.returncode == 0, full.stderr[-3000:]
  with open(tmp_path / 'full' / 'summary.json') as f:
    summary = json.load(f)
  rows = [r for r in read_jsonl(str(tmp_path / 'full' / 'metrics.jsonl')) if 'reward_mean' in r]
  # Every generation-only probe round is charged to 'profile'; the summary's allocator
  # block counts the same samples.
  alloc = summary['allocator']
  assert sum(r['profile_rounds'] for r in rows) >= 1
  # Every generation call is a probe round or a training round (refills included).
  assert all(r['rounds'] == r['profile_rounds'] + r['train_rounds'] for r in rows)
  assert alloc['train_rounds'] == sum(r['train_rounds'] for r in rows)
  assert (summary['flops']['profile'] > 0) == (alloc['profile_samples'] +
                                               alloc['probe_samples'] > 0)
  flops = summary['flops']
  assert flops['total'] == pytest.approx(flops['profile'] + flops['rollout'] + flops['train'])
  # This tiny policy may find no informative group at all: such steps take no optimizer
  # step (issue 50 item 6), so the train step compiles once, or never if all were skipped.
  skipped = sum(r.get('skipped_step', 0) for r in rows)
  assert summary['skipped_steps'] == skipped
  assert summary['compiles']['train_step'] == int(skipped < len(rows))
  test_train.assert_outputs_documented(str(tmp_path / 'full'))

  killed = _run_main(str(tmp_path / 'killed'), kill_after_step=3)
  assert killed.returncode == -signal.SIGKILL
  resumed = _run_main(str(tmp_path / 'killed'))
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  test_train.assert_metrics_match(str(tmp_path / 'full'), str(tmp_path / 'killed'))
