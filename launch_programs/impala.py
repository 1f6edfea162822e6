"""The IMPALA program: queue, learner, N actors, evaluators, counter, supervisor.

Espeholt et al. 2018, Sec. 3 and Fig. 1: actors unroll the latest policy for
n = 20 steps and send each trajectory, with its behaviour logits and initial
core state, through a queue (a Reverb queue table: each trajectory consumed
once, a full queue blocks its actor); one learner trains on batches of 32 with
V-trace and serves parameters. Evaluators run the no-op starts protocol, one
per game. Scale is a profile (`ImpalaConfig.paper()` / `.local()`), never a
code path.

    python -m launch_programs.impala --environment atari/pong --minutes 60
    python -m launch_programs.impala --environment catch --set network=mlp
    # Table 4's multi-task agent: a fixed number of actors per game, the full
    # 18-action set, per-game evaluation in the run record.
    python -m launch_programs.impala \
        --environment atari/pong,atari/breakout --num_actors 16 \
        --set action_set=full

Placement: each actor node steps `--actors_per_node` of the paper's actors
(one environment each) with one batched forward pass (1 = the paper's
layout; agents/impala/actor.py). Under `local_mp` every node is a process;
`--learner_cpus` / `--other_cpus` pin the learner and the rest to disjoint
cores, the CPU budget the benchmark states. The nodes are built by
agents/impala/builder.py and placed by launch_programs/distributed.py.
"""

import sys

from agents.impala import builder as builder_lib
from launch_programs import distributed

Builder = builder_lib.ImpalaBuilder
configs_for_experiment_run, run_experiment, main = distributed.entry_points(
    Builder, __doc__)

if __name__ == '__main__':
  sys.exit(main())
