"""IMPALA learns Catch end to end in one process.

Real components: a Reverb server with the queue, two actors (8 Catch
environments each, batched inference) in threads fetching parameters from
the learner before every unroll, and the learner in the test's thread.
Bounded twice: at most MAX_LEARNER_STEPS updates, and a watchdog that stops
every component after HARD_LIMIT_S whatever happens, so the test cannot hang.

Two agents: the Atari experts' feed-forward one, and one with the LSTM core
(64 units here) learning from Table 2's half-queue, half-replay batches.

Settings that differ from the paper, for speed only: an MLP torso (Catch
boards are 10x5 features), batch 16 and learning rate 0.006 (the paper's
0.0006 is tuned for Atari conv nets over 200M frames). Everything else is
the agent as configured for Atari: unroll 20, V-trace, RMSProp with eps
0.01, entropy 0.01, baseline 0.5, gradient clip 40, summed loss.
Catch: random play scores about -0.6, the optimum is +1. Measured here:
about 120-140 learner steps (15 s) feed-forward, 260-280 (20 s) with the
LSTM and replay.
"""

import threading
import time

import numpy as np
import pytest
import reverb

from agents.impala import actor as actor_lib
from agents.impala import config as config_lib
from agents.impala import learning
from agents.impala import queue as queue_lib
from networks import impala as impala_networks

MAX_LEARNER_STEPS = 800
HARD_LIMIT_S = 100.0
TARGET_RETURN = 0.8
WINDOW = 100


class EpisodeLog:
  """Per-episode rows from the actors' threads (list.append is atomic)."""

  def __init__(self):
    self.rows = []

  def write(self, row):
    self.rows.append(row)

  def recent_mean(self):
    rows = self.rows[-WINDOW:]
    if len(rows) < WINDOW:
      return None
    return float(np.mean([r['episode_return'] for r in rows]))


# Two actor nodes of 8 of the paper's actors each: the local placement.
ENVIRONMENTS_PER_NODE = 8


@pytest.mark.parametrize('use_lstm,replay_proportion', [
    (False, 0.0),  # The Atari experts' feed-forward agent.
    (True, 0.5),  # Figure 3's LSTM core, Table 2's "With Replay" mix.
])
def test_impala_learns_catch(use_lstm, replay_proportion):
  start = time.time()
  config = config_lib.ImpalaConfig.local(
      network='mlp', mlp_sizes=(64,), batch_size=16, queue_capacity=16,
      action_repeat=1, learning_rate=0.006, total_frames=10**7,
      num_actors=16, jit_compile=False, use_lstm=use_lstm,
      lstm_size=64, replay_proportion=replay_proportion,
      replay_capacity=1000)
  environment = actor_lib.make_environment('catch', config, seed=0)
  num_actions = environment.action_spec().num_values
  learner_network = impala_networks.make_network_from_config(config,
                                                             num_actions)
  signature = queue_lib.trajectory_signature(
      environment.observation_spec(), num_actions, config.unroll_length,
      impala_networks.core_state_spec(learner_network))
  server = reverb.Server(queue_lib.make_tables(config, signature))
  address = f'localhost:{server.port}'
  client = reverb.Client(address)
  episodes = EpisodeLog()
  learner = learning.ImpalaLearner(
      learner_network,
      make_dataset=lambda: queue_lib.make_dataset(address, config, signature),
      config=config, signature=signature, replay_client=client,
      retry_period_s=0.2)
  actors = [
      actor_lib.ImpalaActor(
          [actor_lib.make_environment('catch', config, seed=100 * i + j)
           for j in range(ENVIRONMENTS_PER_NODE)],
          impala_networks.make_network_from_config(config, num_actions),
          client, config, actor_id=i, variable_source=learner,
          logger=episodes, wait_slice_ms=200)
      for i in range(2)]
  threads = [threading.Thread(target=actor.run, daemon=True,
                              name=f'impala_actor_{i}')
             for i, actor in enumerate(actors)]

  def stop_everything():
    for actor in actors:
      actor.stop()
    learner.stop()

  watchdog = threading.Timer(HARD_LIMIT_S, stop_everything)
  watchdog.daemon = True
  watchdog.start()
  reached = None
  try:
    for thread in threads:
      thread.start()
    for _ in range(MAX_LEARNER_STEPS):
      if learner.step() is None:
        break  # The watchdog fired.
      mean = episodes.recent_mean()
      if mean is not None and mean >= TARGET_RETURN:
        reached = mean
        break
  finally:
    watchdog.cancel()
    stop_everything()
    for thread in threads:
      thread.join(10)
    alive = [thread.name for thread in threads if thread.is_alive()]
    for actor in actors:
      actor.close()
    server.stop()
  elapsed = time.time() - start
  assert not alive, f'actor threads still running: {alive}'
  assert reached is not None, (
      f'mean return of the last {WINDOW} episodes '
      f'{episodes.recent_mean()} after {learner.num_steps} learner steps '
      f'and {elapsed:.0f} s; wanted >= {TARGET_RETURN}')
  # Every actor fetched the learner's parameters as they changed.
  assert all(actor.parameter_version and actor.parameter_version > 0
             for actor in actors)
  print(f'IMPALA Catch (lstm={use_lstm}, replay={replay_proportion}): mean return {reached:.2f} after {learner.num_steps} '
        f'learner steps, {sum(a.num_steps for a in actors)} agent steps, '
        f'{elapsed:.1f} s')
