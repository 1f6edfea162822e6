r"""The bare limits of the program benchmarks, one measurement per process.

  python -m reproductions.benchmarks.bare_limits bare_apex_step \
      --args_json '{"batch": 32, "xla": false, "seconds": 20}'

A limit is what one part of a program does alone: our Atari environment (and
bare ale_py) on the actors' core, or a learner's own compiled step on one
constant in-memory batch (no Reverb, no decoding) on the learner's core.
common.run_pinned starts each measurement as a process of its own under
`taskset`, so that it is pinned before the interpreter starts, and every
learner step gets a fresh TF runtime capped at one intra- and one inter-op
thread (the learner node's budget under `--learner_cpus 0`): a runtime that
had already run another measurement (XLA off before on, batch 32 before 512)
would carry its threads and compiled state into the next. The learners,
networks and environments measured are the programs' own, imported. The
result is one JSON line, printed last.
"""

import argparse
import json
import time
from typing import Any, Callable, Dict, Tuple

# The Ape-X step is measured on Pong's frames and 6 actions, whatever the game
# of the program runs: its cost does not depend on the game.
_APEX_ENVIRONMENT = 'atari/pong'
_APEX_SPEC = ((84, 84, 4), 6)


def _tensorflow_with_one_thread():
  """TensorFlow capped at one intra- and one inter-op thread.

  Raises RuntimeError if TF's runtime has already started (the cap would not
  hold), so it comes before anything that builds a tensor.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(1)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  return tf


def _time_steps(step: Callable[[], Any], seconds: float,
                warm_up_steps: int = 3) -> Tuple[float, int, float]:
  """(first step's seconds, steps timed, steps/s) of `step` for `seconds`.

  The first `warm_up_steps` calls (tracing, compilation) are not timed.
  """
  start = time.perf_counter()
  step()
  first_step_s = time.perf_counter() - start
  for _ in range(warm_up_steps - 1):
    step()
  start, steps = time.perf_counter(), 0
  while time.perf_counter() - start < seconds:
    step()
    steps += 1
  return first_step_s, steps, steps / (time.perf_counter() - start)


def bare_environment(game: str, seconds: float) -> Dict[str, float]:
  """Frames/s of bare ale_py and of our environment, `seconds` each."""
  # pylint: disable=g-import-not-at-top
  from reproductions.benchmarks import env_speed
  # pylint: enable=g-import-not-at-top
  figures = env_speed.measure(game, seconds, rounds=1)
  return {f'{name}_frames_per_s': config['frames_per_s']
          for name, config in figures.items()}


def bare_apex_step(batch: int, xla: bool, seconds: float) -> Dict[str, float]:
  """ApeXDQNLearner.step on one constant batch of `batch` transitions."""
  tf = _tensorflow_with_one_thread()
  # pylint: disable=g-import-not-at-top
  import numpy as np
  import reverb
  from acme import types
  from agents.apex_dqn import builder as builder_lib
  from agents.apex_dqn import learning
  # pylint: enable=g-import-not-at-top
  builder_class = builder_lib.ApeXDQNBuilder
  config = builder_class.make_config(
      'local', _APEX_ENVIRONMENT, batch_size=batch, jit_compile=xla,
      min_replay_size=max(5000, batch))
  builder = builder_class(config, _APEX_ENVIRONMENT)
  (frame_shape, num_actions), b = _APEX_SPEC, batch
  rng = np.random.default_rng(0)

  def frames():
    return tf.constant(rng.integers(0, 256, (b,) + frame_shape,
                                    dtype=np.uint8))

  sample = reverb.ReplaySample(
      info=reverb.SampleInfo(
          key=tf.constant(np.arange(b, dtype=np.uint64)),
          probability=tf.constant(np.full(b, 1e-4)),
          table_size=tf.constant(np.full(b, 10000, np.int64)),
          priority=tf.constant(np.ones(b))),
      data=types.Transition(
          observation=frames(),
          action=tf.constant(rng.integers(0, num_actions, b, dtype=np.int32)),
          reward=tf.constant(rng.uniform(-1, 1, b).astype(np.float32)),
          discount=tf.constant(np.full(b, 0.97, np.float32)),
          next_observation=frames(),
          # The learner reads the age of each transition from its extras.
          extras={'learner_step': tf.constant(np.zeros(b, np.int64))}))
  learner = learning.ApeXDQNLearner(
      builder.make_network(_APEX_SPEC), builder.make_network(_APEX_SPEC),
      dataset=tf.data.Dataset.from_tensors(sample).repeat(), config=config)
  _, _, steps_per_s = _time_steps(learner.step, seconds)
  return {'steps_per_s': steps_per_s, 'samples_per_s': steps_per_s * batch}


def _random_trajectories(signature, batch: int, num_actions: int, rng):
  """A batch of the queue's Trajectory structure, Pong-like episode ends."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tree  # pylint: disable=g-import-not-at-top
  from agents.impala import queue  # pylint: disable=g-import-not-at-top
  steps = signature.first.shape[0]

  def draw(spec, low=0, high=256):
    shape = (batch,) + tuple(spec.shape)
    dtype = spec.dtype.as_numpy_dtype
    if spec.dtype.is_integer:
      return rng.integers(low, high, shape).astype(dtype)
    return rng.normal(size=shape).astype(dtype)

  first = rng.random((batch, steps)) < 0.005  # Pong's episodes are long.
  first[:, 0] = rng.random(batch) < 0.1
  return queue.Trajectory(
      observation=draw(signature.observation),
      first=first,
      last_action=draw(signature.last_action, 0, num_actions),
      last_reward=rng.choice(np.float32([-1, 0, 0, 0, 0, 0, 0, 0, 1]),
                             (batch, steps)),
      discount=np.where(first, 0.0, 1.0).astype(np.float32),
      behaviour_logits=draw(signature.behaviour_logits),
      behaviour_version=np.zeros((batch, steps), np.int64),
      core_state=tree.map_structure(draw, signature.core_state))


def bare_impala_step(batch: int, xla: bool, seconds: float,
                     game: str = 'pong', network: str = 'shallow',
                     unroll: int = 20) -> Dict[str, float]:
  """ImpalaLearner.step on one constant batch of `batch` x `unroll` steps."""
  tf = _tensorflow_with_one_thread()
  # pylint: disable=g-import-not-at-top
  import numpy as np
  from agents.impala import actor as actor_lib
  from agents.impala import builder as builder_lib
  from agents.impala import learning
  from agents.impala import queue
  from networks import impala as impala_networks
  # pylint: enable=g-import-not-at-top
  environment_name = f'atari/{game}'
  config = builder_lib.ImpalaBuilder.make_config(
      'local', environment_name, network=network, batch_size=batch,
      unroll_length=unroll, jit_compile=xla)
  environment = actor_lib.make_environment(environment_name, config, seed=0)
  num_actions = int(environment.action_spec().num_values)
  model = impala_networks.make_network_from_config(config, num_actions)
  signature = queue.trajectory_signature(
      environment.observation_spec(), num_actions, config.unroll_length,
      impala_networks.core_state_spec(model))
  trajectories = _random_trajectories(signature, batch, num_actions,
                                      np.random.default_rng(0))
  learner = learning.ImpalaLearner(
      model, dataset=tf.data.Dataset.from_tensors(trajectories).repeat(),
      config=config, signature=signature)
  first_step_s, steps, steps_per_s = _time_steps(learner.step, seconds)
  agent_steps_per_s = steps_per_s * batch * unroll
  return {'steps_per_s': steps_per_s, 'agent_steps_per_s': agent_steps_per_s,
          'frames_per_s': agent_steps_per_s * config.action_repeat,
          'steps': steps, 'first_step_s': first_step_s}


MEASUREMENTS: Dict[str, Callable[..., Dict[str, float]]] = {
    f.__name__: f for f in (bare_environment, bare_apex_step, bare_impala_step)}


def main(argv=None) -> Dict[str, float]:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('measurement', choices=sorted(MEASUREMENTS))
  parser.add_argument('--args_json', default='{}',
                      help='the measurement\'s keyword arguments, a JSON '
                           'object')
  args = parser.parse_args(argv)
  result = MEASUREMENTS[args.measurement](**json.loads(args.args_json))
  print(json.dumps(result), flush=True)
  return result


if __name__ == '__main__':
  main()
