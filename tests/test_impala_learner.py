"""The IMPALA learner: loss against NumPy, RMSProp, anneal, checkpoints, XLA.

The reference loss below is written from the paper (eq. 1, Sec. 4.2, App. D:
summed over time and batch) and the released code's loss functions, with
V-trace as the plain double sum of eq. (1) rather than the backward
recursion the implementation uses.
"""

import pathlib
import subprocess
import sys
import threading
import time

from acme.utils import counting
import numpy as np
import pytest
import reverb
import tensorflow as tf
import tree

from agents import optimizers
from agents.impala import config as config_lib
from agents.impala import learning
from agents.impala import queue as queue_lib
from agents.impala import vtrace
from networks import impala as impala_networks

NUM_ACTIONS = 3
FEATURES = 4
UNROLL = 5
BATCH = 2


def _config(**overrides):
  settings = dict(network='mlp', mlp_sizes=(8,), use_lstm=True, lstm_size=6,
                  unroll_length=UNROLL, batch_size=BATCH, queue_capacity=4,
                  action_repeat=4, jit_compile=False, total_frames=10**6)
  settings.update(overrides)
  return config_lib.ImpalaConfig.local(**settings)


def _signature(network):
  return queue_lib.trajectory_signature(
      tf.TensorSpec([FEATURES], tf.float32), NUM_ACTIONS, UNROLL,
      impala_networks.core_state_spec(network))


def _batch(seed=0, network=None, use_lstm=True):
  """A batch-major batch of B trajectories with episode ends inside."""
  rng = np.random.default_rng(seed)
  steps = UNROLL + 1
  first = np.zeros((BATCH, steps), bool)
  first[0, 3] = True
  first[1, 0] = True
  first[1, 4] = True
  discount = np.where(first, 0.0, 1.0).astype(np.float32)
  discount[0, 2] = 0.7  # An environment's own discount in mid-episode.
  if use_lstm:
    core_state = tree.map_structure(
        lambda s: rng.normal(size=(BATCH,) + tuple(s.shape)).astype(
            np.float32), impala_networks.core_state_spec(network))
  else:
    core_state = ()
  return queue_lib.Trajectory(
      observation=rng.normal(size=(BATCH, steps, FEATURES)).astype(
          np.float32),
      first=first,
      last_action=rng.integers(0, NUM_ACTIONS, (BATCH, steps)).astype(
          np.int32),
      # Rewards beyond [-1, 1] so that clipping matters.
      last_reward=rng.normal(scale=2.0, size=(BATCH, steps)).astype(
          np.float32),
      discount=discount,
      behaviour_logits=rng.normal(size=(BATCH, steps, NUM_ACTIONS)).astype(
          np.float32),
      behaviour_version=rng.integers(0, 5, (BATCH, steps)).astype(np.int64),
      core_state=core_state)


def _learner(config, batch, network=None, **kwargs):
  network = network or impala_networks.make_network_from_config(
      config, NUM_ACTIONS)
  dataset = tf.data.Dataset.from_tensors(batch).repeat()
  return learning.ImpalaLearner(network, dataset=dataset, config=config,
                                signature=_signature(network), **kwargs)


# --- NumPy reference --------------------------------------------------------


def np_log_softmax(logits):
  shifted = logits - logits.max(-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def np_vtrace(log_rhos, discounts, rewards, values, bootstrap, rho_bar,
              pg_rho_bar, c_bar, lambda_=1.0):
  """Eq. (1) as a double sum, per batch column; Sec. 4.2 advantages."""
  rhos = np.exp(log_rhos)
  clip = lambda bar, x: x if bar is None else np.minimum(bar, x)
  rho, cs = clip(rho_bar, rhos), lambda_ * clip(c_bar, rhos)
  time_steps = values.shape[0]
  next_values = np.concatenate([values[1:], bootstrap[None]], 0)
  vs = np.zeros_like(values)
  for b in range(values.shape[1]):
    for s in range(time_steps):
      total = values[s, b]
      for t in range(s, time_steps):
        trace = np.prod([discounts[i, b] * cs[i, b] for i in range(s, t)])
        delta = rho[t, b] * (rewards[t, b] + discounts[t, b] *
                             next_values[t, b] - values[t, b])
        total += trace * delta
      vs[s, b] = total
  next_vs = np.concatenate([vs[1:], bootstrap[None]], 0)
  advantages = clip(pg_rho_bar, rhos) * (rewards + discounts * next_vs -
                                         values)
  return vs, advantages


def np_loss(batch, logits_all, values_all, config):
  """The IMPALA loss from the learner network's outputs ([T+1, B, ...])."""
  tm = lambda x: np.swapaxes(np.asarray(x), 0, 1)
  logits, values, bootstrap = logits_all[:-1], values_all[:-1], values_all[-1]
  actions = tm(batch.last_action)[1:]
  rewards = np.clip(tm(batch.last_reward)[1:], -1.0, 1.0)
  discounts = config.discount * tm(batch.discount)[1:]
  behaviour = tm(batch.behaviour_logits)[:-1]
  log_pi = np_log_softmax(logits)
  pick = lambda lp: np.take_along_axis(lp, actions[..., None], -1)[..., 0]
  log_rhos = pick(log_pi) - pick(np_log_softmax(behaviour))
  if config.correction == 'vtrace':
    vs, adv = np_vtrace(log_rhos, discounts, rewards, values, bootstrap,
                        1.0, 1.0, 1.0)
  else:
    vs, adv = np_vtrace(np.zeros_like(log_rhos), discounts, rewards, values,
                        bootstrap, None, None, None)
    if config.correction == 'one_step_is':
      adv = np.minimum(1.0, np.exp(log_rhos)) * adv
  if config.correction == 'epsilon_correction':
    pg_log_probs = np.log(pick(np.exp(log_pi)) + 1e-6)
  else:
    pg_log_probs = pick(log_pi)
  pg = -np.sum(pg_log_probs * adv)
  baseline = 0.5 * np.sum((vs - values)**2)
  entropy = -np.sum(np.exp(log_pi) * log_pi, -1)
  entropy_loss = -np.sum(entropy)
  total = pg + 0.5 * baseline + 0.01 * entropy_loss
  rhos = np.exp(log_rhos)
  return dict(total_loss=total, pg_loss=pg, baseline_loss=baseline,
              entropy_loss=entropy_loss, mean_rho=rhos.mean(),
              rho_clipped_fraction=(rhos > 1.0).mean())


def _network_outputs(network, batch):
  data = learning.time_major(batch)
  outputs, _ = network.unroll(
      impala_networks.ImpalaInputs(data.observation, data.first,
                                   data.last_action, data.last_reward),
      data.core_state)
  return outputs.policy_logits.numpy(), outputs.baseline.numpy()


# --- Config -------------------------------------------------------------------


def test_config_corrections_are_vtraces():
  assert config_lib.CORRECTIONS == vtrace.CORRECTIONS
  assert config_lib.RMSPROP_STYLES == optimizers.RMSPROPS


def test_config_module_does_not_import_tensorflow():
  code = ('import sys; import agents.impala.config; '
          'sys.exit(int("tensorflow" in sys.modules))')
  assert subprocess.run([sys.executable, '-c', code], check=False,
                        cwd=pathlib.Path(__file__).resolve().parents[1]
                        ).returncode == 0


def test_config_paper_values():
  c = config_lib.ImpalaConfig.paper()
  assert (c.unroll_length, c.batch_size, c.discount) == (20, 32, 0.99)
  assert (c.baseline_cost, c.entropy_cost) == (0.5, 0.01)
  assert (c.learning_rate, c.rmsprop_epsilon, c.rmsprop_momentum,
          c.rmsprop_decay) == (0.0006, 0.01, 0.0, 0.99)
  assert c.max_gradient_norm == 40.0 and c.reward_clipping == 'abs_one'
  assert c.num_actors == 48 and c.jit_compile and not c.use_lstm
  assert c.correction == 'vtrace' and c.replay_proportion == 0.0
  assert c.frames_per_learner_step == 32 * 20 * 4
  assert [config_lib.ImpalaConfig.paper_distributed(n).num_actors
          for n in (150, 375, 500)] == [150, 375, 500]
  assert config_lib.ImpalaConfig.paper_distributed(500).batch_size == 128
  replay = config_lib.ImpalaConfig.paper(replay_proportion=0.5)
  assert (replay.queue_batch_size, replay.replay_batch_size) == (16, 16)
  assert replay.replay_capacity == 10_000


@pytest.mark.parametrize('overrides,message', [
    (dict(correction='retrace'),
     "'vtrace', 'one_step_is', 'epsilon_correction', 'none'"),
    (dict(network='resnet'), "'shallow', 'deep', 'mlp'"),
    (dict(reward_clipping='tanh'), "'abs_one', 'soft_asymmetric', 'none'"),
    (dict(action_set='all'), "'minimal', 'full'"),
    (dict(replay_proportion=0.3), 'whole number'),
    (dict(replay_proportion=1.0), r'in \[0, 1\)'),
    (dict(unroll_length=0), 'integer >= 1'),
    (dict(learning_rate=0.0), '> 0'),
])
def test_config_errors_name_valid_choices(overrides, message):
  with pytest.raises(ValueError, match=message):
    config_lib.ImpalaConfig.paper(**overrides)


def test_config_distributed_actor_counts_are_table_1s():
  with pytest.raises(ValueError, match='150, 375, 500'):
    config_lib.ImpalaConfig.paper_distributed(200)


# --- Loss ---------------------------------------------------------------------


@pytest.mark.parametrize('correction', vtrace.CORRECTIONS)
def test_loss_matches_numpy_reference(correction):
  config = _config(correction=correction)
  network = impala_networks.make_network_from_config(config, NUM_ACTIONS)
  impala_networks.create_variables(network,
                                   tf.TensorSpec([FEATURES], tf.float32))
  batch = _batch(1, network)
  logits, values = _network_outputs(network, batch)
  expected = np_loss(batch, logits, values, config)
  metrics = _learner(config, batch, network).step()
  for key, value in expected.items():
    np.testing.assert_allclose(metrics[key], value, rtol=1e-4, atol=1e-4,
                               err_msg=key)


def test_feed_forward_loss_matches_numpy_reference():
  config = _config(use_lstm=False)
  network = impala_networks.make_network_from_config(config, NUM_ACTIONS)
  impala_networks.create_variables(network,
                                   tf.TensorSpec([FEATURES], tf.float32))
  batch = _batch(2, network, use_lstm=False)
  logits, values = _network_outputs(network, batch)
  expected = np_loss(batch, logits, values, config)
  metrics = _learner(config, batch, network).step()
  np.testing.assert_allclose(metrics['total_loss'], expected['total_loss'],
                             rtol=1e-4, atol=1e-4)


def _one_update(config):
  """(parameters before, their loss gradients, the learner after one step)."""
  network = impala_networks.make_network_from_config(config, NUM_ACTIONS)
  impala_networks.create_variables(network,
                                   tf.TensorSpec([FEATURES], tf.float32))
  batch = _batch(3, network)
  with tf.GradientTape() as tape:
    loss = learning.impala_loss(network, learning.time_major(batch),
                                config)['total_loss']
  params = network.trainable_variables
  grads = [g.numpy() for g in tape.gradient(loss, params)]
  before = [p.numpy() for p in params]
  metrics = _learner(config, batch, network).step()
  return before, grads, params, metrics


def test_update_is_clipped_rmsprop_with_eps_inside_the_root():
  """theta -= lr g / sqrt(decay * 1 + (1 - decay) g^2 + eps), g clipped."""
  config = _config(max_gradient_norm=0.05)  # Small, so clipping happens.
  before, grads, params, metrics = _one_update(config)
  norm = np.sqrt(sum(np.sum(g**2) for g in grads))
  assert norm > config.max_gradient_norm
  scale = config.max_gradient_norm / norm
  np.testing.assert_allclose(metrics['gradient_norm'], norm, rtol=1e-4)
  assert metrics['gradient_clipped'] == 1.0
  for p, b, g in zip(params, before, grads):
    g = g * scale
    ms = config.rmsprop_decay * 1.0 + (1 - config.rmsprop_decay) * g**2
    expected = b - config.learning_rate * g / np.sqrt(ms +
                                                      config.rmsprop_epsilon)
    np.testing.assert_allclose(p.numpy(), expected, rtol=1e-5, atol=1e-7)


def test_pytorch_rmsprop_puts_eps_outside_the_root_and_starts_at_zero():
  """The diagnostic optimizer: theta -= lr g / (sqrt((1 - decay) g^2) + eps)."""
  config = _config(rmsprop_style='pytorch', max_gradient_norm=1e6)
  before, grads, params, metrics = _one_update(config)
  assert metrics['gradient_clipped'] == 0.0
  for p, b, g in zip(params, before, grads):
    ms = (1 - config.rmsprop_decay) * g**2
    expected = b - config.learning_rate * g / (np.sqrt(ms) +
                                               config.rmsprop_epsilon)
    np.testing.assert_allclose(p.numpy(), expected, rtol=1e-5, atol=1e-7)


def test_policy_lag_counts_updates_since_the_behaviour_parameters():
  # Step 7; versions 5, 7, 3 and two unknown (-1): lags 2, 0, 4.
  versions = tf.constant([[5, -1], [7, 3], [-1, -1]], tf.int64)
  lag = learning.policy_lag(tf.constant(7, tf.int64), versions)
  np.testing.assert_allclose(lag.numpy(), 2.0)
  unknown = learning.policy_lag(tf.constant(7, tf.int64),
                                -tf.ones([2, 2], tf.int64))
  assert unknown.numpy() == -1.0


def test_step_reports_the_policy_lag_of_its_batch():
  config = _config()
  network = impala_networks.make_network_from_config(config, NUM_ACTIONS)
  batch = _batch(5, network)
  learner = _learner(config, batch, network)
  # The bootstrap step's version is never the behaviour of a transition.
  versions = np.asarray(batch.behaviour_version)[:, :-1]
  for step in range(2):
    metrics = learner.step()
    np.testing.assert_allclose(metrics['policy_lag'],
                               np.mean(step - versions), rtol=1e-6)


def test_replayed_trajectories_do_not_advance_the_anneal():
  """Sec. 5.2.2 mixing: half of each batch is replay, so half is new frames.

  The anneal must reach 0 when the actors have made total_frames, not when
  the learner has consumed that many (half of them twice).
  """
  fresh = (BATCH // 2) * UNROLL * 4
  config = _config(replay_proportion=0.5, total_frames=4 * fresh,
                   learning_rate=0.01)
  assert config.frames_per_learner_step == fresh
  learner = _learner(config, _batch(4, impala_networks.make_network_from_config(
      config, NUM_ACTIONS)))
  rates = [learner.step()['learning_rate'] for _ in range(5)]
  np.testing.assert_allclose(rates, [0.01, 0.0075, 0.005, 0.0025, 0.0],
                             atol=1e-9)
  assert learner.num_frames == 5 * fresh


def test_learning_rate_anneals_linearly_to_zero_by_frames():
  frames_per_step = BATCH * UNROLL * 4
  config = _config(total_frames=4 * frames_per_step, learning_rate=0.01)
  learner = _learner(config, _batch(4, impala_networks.make_network_from_config(
      config, NUM_ACTIONS)))
  rates, frames = [], []
  for _ in range(6):
    metrics = learner.step()
    rates.append(metrics['learning_rate'])
    frames.append(metrics['learner_frames'])
  np.testing.assert_allclose(rates, [0.01, 0.0075, 0.005, 0.0025, 0.0, 0.0],
                             atol=1e-9)
  assert frames == [frames_per_step * k for k in range(1, 7)]
  assert learner.num_steps == 6 and learner.num_frames == 6 * frames_per_step


def test_checkpoint_round_trip_restores_network_optimizer_and_counters(
    tmp_path):
  config = _config()
  network = impala_networks.make_network_from_config(config, NUM_ACTIONS)
  impala_networks.create_variables(network,
                                   tf.TensorSpec([FEATURES], tf.float32))
  batch = _batch(5, network)
  counter = counting.Counter()
  first = _learner(config, batch, network, counter=counter,
                   checkpoint_dir=str(tmp_path))
  first.run(num_steps=3)  # Saves when it returns.
  assert first.num_steps == 3

  restored_counter = counting.Counter()
  second = _learner(config, batch, counter=restored_counter,
                    checkpoint_dir=str(tmp_path))
  assert second.restored_from is not None
  assert second.num_steps == 3 and second.num_frames == first.num_frames
  assert restored_counter.get_counts()['learner_steps'] == 3
  for a, b in zip(first.network.variables, second.network.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  for slot in ('ms', 'mom'):
    for a, b in zip(getattr(first.optimizer, slot),
                    getattr(second.optimizer, slot)):
      np.testing.assert_array_equal(a.numpy(), b.numpy())
  # The mean-square slots moved away from their initial 1.0: the check above
  # compares trained state.
  assert not np.allclose(first.optimizer.ms[0].numpy(), 1.0)
  # Both continue identically.
  a, b = first.step(), second.step()
  for key in ('total_loss', 'learning_rate', 'learner_steps',
              'learner_frames'):
    assert a[key] == pytest.approx(b[key], rel=1e-6), key
  for x, y in zip(first.network.variables, second.network.variables):
    np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize('use_lstm', [False, True])
def test_xla_and_plain_tf_function_agree(use_lstm):
  results = []
  initial = None
  for jit_compile in (False, True):
    config = _config(jit_compile=jit_compile, use_lstm=use_lstm)
    network = impala_networks.make_network_from_config(config, NUM_ACTIONS)
    impala_networks.create_variables(network,
                                     tf.TensorSpec([FEATURES], tf.float32))
    if initial is None:
      initial = [v.numpy() for v in network.variables]
    else:
      for v, x in zip(network.variables, initial):
        v.assign(x)
    learner = _learner(config, _batch(6, network, use_lstm), network)
    metrics = [learner.step() for _ in range(2)]
    results.append((metrics, [v.numpy() for v in network.variables]))
  (plain, plain_vars), (xla, xla_vars) = results
  for m_plain, m_xla in zip(plain, xla):
    for key in ('total_loss', 'pg_loss', 'baseline_loss', 'entropy_loss',
                'gradient_norm'):
      assert m_xla[key] == pytest.approx(m_plain[key], rel=1e-4,
                                         abs=1e-4), key
  for a, b in zip(plain_vars, xla_vars):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_get_variables_policy_and_version():
  config = _config()
  learner = _learner(config, _batch(7, impala_networks.make_network_from_config(
      config, NUM_ACTIONS)))
  learner.step()
  policy, version = learner.get_variables(['policy', 'version'])
  assert len(policy) == len(learner.network.variables)
  for value, variable in zip(policy, learner.network.variables):
    np.testing.assert_array_equal(value, variable.numpy())
  assert int(version[0]) == 1
  with pytest.raises(KeyError, match='policy, version'):
    learner.get_variables(['target'])


def test_learner_waiting_on_an_empty_queue_stops_promptly():
  config = _config()
  network = impala_networks.make_network_from_config(config, NUM_ACTIONS)
  signature = _signature(network)
  server = reverb.Server(queue_lib.make_tables(config, signature))
  try:
    address = f'localhost:{server.port}'
    learner = learning.ImpalaLearner(
        network, make_dataset=lambda: queue_lib.make_dataset(
            address, config, signature),
        config=config, signature=signature,
        replay_client=reverb.Client(address), retry_period_s=0.2)
    thread = threading.Thread(target=learner.run, daemon=True)
    thread.start()
    time.sleep(0.5)
    assert thread.is_alive() and learner.num_steps == 0
    start = time.time()
    learner.stop()
    thread.join(30)
    assert not thread.is_alive()
    # Reverb's sampler waits on an empty queue for good: without the 0.2 s
    # slices the learner would never stop. 10 s tells the two apart on a
    # loaded machine too.
    assert time.time() - start < 10.0
    report = learner.report()
    assert report['queue_size'] == 0 and report['learner_steps'] == 0
  finally:
    server.stop()


def test_warm_up_compiles_the_step_and_leaves_no_trace_of_its_update():
  config = _config()
  batch = _batch(8, impala_networks.make_network_from_config(config,
                                                             NUM_ACTIONS))
  learners = []
  for _ in range(2):
    network = impala_networks.make_network_from_config(config, NUM_ACTIONS)
    learners.append(_learner(config, batch, network))
  warmed, cold = learners
  for a, b in zip(warmed.network.variables, cold.network.variables):
    b.assign(a)
  initial = [v.numpy() for v in warmed.network.variables]

  # Actors fetching parameters during the warm-up see the parameters as they
  # were, never the throw-away update.
  fetches, changed, stop = [0], [], threading.Event()

  def fetch():
    while not stop.is_set():
      policy, version = warmed.get_variables(['policy', 'version'])
      fetches[0] += 1
      if int(version[0]) != 0 or any(
          not np.array_equal(value, expected)
          for value, expected in zip(policy, initial)):
        changed.append(fetches[0])
      time.sleep(0.001)

  thread = threading.Thread(target=fetch)
  thread.start()
  try:
    assert warmed.warm_up()
  finally:
    stop.set()
    thread.join()
  assert fetches[0] > 0 and not changed
  assert warmed.num_steps == 0 and warmed.num_frames == 0

  # Then the two learners step identically: network, optimizer slots,
  # learning rate and counters were all restored.
  for _ in range(2):
    m_warmed, m_cold = warmed.step(), cold.step()
    for key in ('total_loss', 'gradient_norm', 'learning_rate',
                'learner_steps', 'learner_frames'):
      assert m_warmed[key] == m_cold[key], key
  for a, b in zip(warmed.network.variables + warmed.optimizer.variables,
                  cold.network.variables + cold.optimizer.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  # And the real steps used the warm-up's compiled step.
  assert warmed._step_fn.experimental_get_tracing_count() == 1  # pylint: disable=protected-access


def test_warm_up_declines_when_the_batch_shape_is_unknown():
  config = _config()
  network = impala_networks.make_network_from_config(config, NUM_ACTIONS)
  batch = _batch(9, network)
  # Unknown batch dimension: nothing can be traced ahead of the data.
  dataset = tf.data.Dataset.from_tensors(batch).repeat().unbatch().batch(
      BATCH)
  learner = learning.ImpalaLearner(network, dataset=dataset, config=config,
                                   signature=_signature(network))
  assert not learner.warm_up()
  assert learner.step() is not None
