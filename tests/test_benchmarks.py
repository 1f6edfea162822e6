"""The benchmarks' own limits still run against the code they measure.

The benchmark scripts stay out of the suite (they take minutes and print
figures). Their bare train steps, though, build the learners with hand-made
batches, so a field the learner comes to read (a new extras key, say) breaks
them silently. Each runs here for a fraction of a second on a tiny batch.
"""

from reproductions.benchmarks import bare_limits
from reproductions.benchmarks import common


def test_bare_train_steps_run_on_todays_learners():
  cpus = [common.LEARNER_CPU]
  apex = common.run_pinned(bare_limits.bare_apex_step, cpus,
                           timeout_s=240, batch=4, xla=False, seconds=0.3)
  assert apex['steps_per_s'] > 0
  impala = common.run_pinned(bare_limits.bare_impala_step, cpus,
                             timeout_s=240, batch=2, xla=False, seconds=0.3,
                             unroll=5)
  assert impala['steps'] > 0 and impala['agent_steps_per_s'] > 0
