"""The Ape-X DQN program: replay, learner, N actors, evaluator, counter, supervisor.

Horgan et al. 2018, Sec. 3 and Fig. 1: many actors with their own epsilon feed
one prioritized replay; one learner samples it, writes priorities back and
serves parameters; an evaluator runs the no-op starts protocol. Scale is a
profile (`ApeXDQNConfig.paper()` / `.local()`), never a code path: the same
program runs 1 or 360 actors.

    python -m launch_programs.apex_dqn --environment atari/pong --minutes 10
    python -m launch_programs.apex_dqn --environment catch --num_actors 2

Placement: under `local_mp` each node is a process. `actors_per_node` = 1
gives every actor its own process, the paper's one-actor-per-machine layout;
it costs a TF runtime per actor (~550 MB), so 256 actors would need ~140 GB.
`actors_per_node` = K hosts K of the paper's actors in one node (each still
with its own environment, epsilon, n-step stream and buffer; see
agents/apex_dqn/actor.py) and batches their forward passes; 256 actors then
fit in ~3 GB (README "Measured performance"). The nodes are built by
agents/apex_dqn/builder.py and placed by launch_programs/distributed.py. `--learner_cpus` /
`--other_cpus` pin the learner and everything else to disjoint cores, the
CPU budget the benchmark states.
"""

import sys

from agents.apex_dqn import builder as builder_lib
from launch_programs import distributed

Builder = builder_lib.ApeXDQNBuilder
configs_for_experiment_run, run_experiment, main = distributed.entry_points(
    Builder, __doc__)

if __name__ == '__main__':
  sys.exit(main())
