"""Ape-X DQN math against plain reference implementations written here.

Covers the exploration schedule (Sec. 4.1), the config, n-step transitions
with truncation at episode end (App. F), the double-Q target, importance
weights and loss (Sec. 3.1, 4.1), and the dueling network (App. C).
"""

import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf

from agents.apex_dqn import config as config_lib
from agents.apex_dqn import targets
from networks import dqn

# --- Exploration schedule and config. --------------------------------------


@pytest.mark.parametrize('num_actors', [2, 3, 8, 360])
def test_actor_epsilons_match_formula(num_actors):
  expected = [0.4**(1 + 7 * i / (num_actors - 1)) for i in range(num_actors)]
  got = config_lib.actor_epsilons(num_actors)
  np.testing.assert_allclose(got, expected, rtol=1e-12)
  assert got[0] == pytest.approx(0.4)
  assert got[-1] == pytest.approx(0.4**8)


def test_single_actor_gets_base_epsilon():
  np.testing.assert_array_equal(config_lib.actor_epsilons(1), [0.4])
  np.testing.assert_array_equal(config_lib.actor_epsilons(1, base=0.3), [0.3])


def test_actor_epsilons_rejects_bad_arguments():
  for kwargs in (dict(num_actors=0), dict(num_actors=2, base=0.0),
                 dict(num_actors=2, base=1.5), dict(num_actors=2, alpha=-1)):
    with pytest.raises(ValueError):
      config_lib.actor_epsilons(**kwargs)


def test_paper_config_values():
  c = config_lib.ApeXDQNConfig.paper()
  assert c.num_actors == 360 and c.n_step == 3 and c.batch_size == 512
  assert c.replay_soft_capacity == 2_000_000 and c.min_replay_size == 50_000
  assert (c.priority_exponent, c.importance_sampling_exponent) == (0.6, 0.4)
  assert c.learning_rate == pytest.approx(6.25e-5)
  assert (c.rmsprop_decay, c.rmsprop_epsilon, c.rmsprop_momentum) == (
      0.95, 1.5e-7, 0.0)
  assert c.rmsprop_centered and c.max_gradient_norm == 40.0
  assert c.target_update_period == 2500
  assert c.actor_update_period_frames == 400
  assert c.actor_update_period_steps == 100
  assert (c.actor_buffer_size, c.actor_send_batch_size) == (100, 50)
  assert c.max_episode_frames == 50_000 and c.max_episode_steps == 12_500
  assert c.prefetch_batches == 16
  assert c.jit_compile and c.compress_observations
  assert c.discount == 0.99
  assert c.epsilons.shape == (360,)
  assert c.actor_epsilon(359) == pytest.approx(0.4**8)


def test_local_profile_is_valid_and_only_rescales():
  paper = config_lib.ApeXDQNConfig.paper()
  local = config_lib.ApeXDQNConfig.local()
  assert local.num_actors == 4 and local.batch_size <= 64
  assert local.replay_soft_capacity == 100_000
  # The method is unchanged: same learning rule and replay exponents.
  for field in ('n_step', 'discount', 'learning_rate', 'priority_exponent',
                'importance_sampling_exponent', 'max_gradient_norm',
                'epsilon_base', 'epsilon_alpha'):
    assert getattr(local, field) == getattr(paper, field), field
  assert config_lib.ApeXDQNConfig.local(num_actors=2).num_actors == 2


@pytest.mark.parametrize('field,value,message', [
    ('priority_exponent', -0.4, 'priority_exponent'),
    ('actor_send_batch_size', 200, 'actor_send_batch_size'),
    ('min_replay_size', 3_000_000, 'min_replay_size'),
    ('num_actors', 0, 'num_actors'),
    ('n_step', 1.5, 'n_step'),
    ('discount', 1.1, 'discount'),
    ('importance_sampling_exponent', 2.0, 'importance_sampling_exponent'),
    ('rmsprop_decay', 1.0, 'rmsprop_decay'),
    ('batch_size', 100_000, 'batch_size'),
])
def test_config_rejects_bad_values(field, value, message):
  with pytest.raises(ValueError, match=message):
    dataclasses.replace(config_lib.ApeXDQNConfig.paper(), **{field: value})


def test_config_is_frozen():
  with pytest.raises(dataclasses.FrozenInstanceError):
    config_lib.ApeXDQNConfig.paper().batch_size = 1


# --- n-step transitions. --------------------------------------------------


def reference_nstep(observations, actions, rewards, discounts, n, gamma):
  """Plain loop: every t of one episode -> (t, t+k, R, gamma_acc, k)."""
  horizon = len(actions)
  out = []
  for t in range(horizon):
    k = min(n, horizon - t)
    ret, acc = 0.0, 1.0
    for j in range(k):
      ret += acc * rewards[t + j]
      acc *= gamma * discounts[t + j]
    out.append((observations[t], actions[t], ret, acc, observations[t + k], k))
  return out


@pytest.mark.parametrize('n', [1, 3, 5])
def test_nstep_accumulator_matches_reference(n):
  gamma = 0.9
  rng = np.random.default_rng(n)
  acc = targets.NStepAccumulator(n=n, discount=gamma)
  # Episodes shorter than, equal to and longer than n; terminal (discount 0
  # at the end) and time-limit truncated (discount 1 at the end).
  episodes = [(1, True), (2, False), (n, True), (7, True), (9, False),
              (3, True)]
  global_step = 0
  for episode, (length, terminal) in enumerate(episodes):
    observations = [f'e{episode}s{t}' for t in range(length + 1)]
    actions = list(rng.integers(0, 6, size=length))
    rewards = list(rng.normal(size=length))
    discounts = [1.0] * length
    if terminal:
      discounts[-1] = 0.0
    expected = reference_nstep(observations, actions, rewards, discounts, n,
                               gamma)

    got = []
    acc.start(observations[0], extras=('q', 0))
    for t in range(length):
      last = t == length - 1
      emitted = acc.step(actions[t], rewards[t], discounts[t],
                         observations[t + 1], next_extras=('q', t + 1),
                         last=last)
      if not last:
        assert len(emitted) == (1 if t + 1 >= n else 0)
      got.extend(emitted)
    assert acc.num_pending == 0
    assert len(got) == length
    for i, (tr, ref) in enumerate(zip(got, expected)):
      obs, action, ret, disc, next_obs, k = ref
      assert tr.observation == obs and tr.next_observation == next_obs
      assert tr.action == action and tr.num_steps == k
      assert tr.reward == pytest.approx(ret, abs=1e-12)
      assert tr.discount == pytest.approx(disc, abs=1e-12)
      assert tr.step == global_step + i
      assert tr.extras == ('q', i) and tr.next_extras == ('q', i + k)
      if terminal and i + k == length:
        assert tr.discount == 0.0
    global_step += length
  assert acc.steps == global_step


def test_nstep_truncated_return_at_episode_end():
  # Episode of 2 steps with n = 3: returns are truncated, not padded.
  acc = targets.NStepAccumulator(n=3, discount=0.5)
  acc.start('s0')
  assert acc.step(0, 1.0, 1.0, 's1') == []
  out = acc.step(1, 2.0, 0.0, 's2', last=True)
  assert [(t.observation, t.next_observation) for t in out] == [('s0', 's2'),
                                                                ('s1', 's2')]
  assert out[0].reward == pytest.approx(1.0 + 0.5 * 2.0)
  assert out[1].reward == pytest.approx(2.0)
  assert out[0].discount == 0.0 and out[1].discount == 0.0


def test_nstep_flush_reset_and_misuse():
  acc = targets.NStepAccumulator(n=3, discount=0.5)
  with pytest.raises(ValueError):
    acc.step(0, 0.0, 1.0, 's1')
  acc.start('s0')
  acc.step(0, 1.0, 1.0, 's1')
  with pytest.raises(ValueError, match='flush'):
    acc.start('x0')
  flushed = acc.flush()
  assert len(flushed) == 1 and flushed[0].discount == pytest.approx(0.5)
  assert flushed[0].next_observation == 's1'
  acc.start('t0')
  acc.step(0, 1.0, 1.0, 't1')
  acc.reset()
  assert acc.num_pending == 0
  acc.start('u0')
  with pytest.raises(ValueError):
    targets.NStepAccumulator(n=0, discount=0.9)


# --- Targets, priorities, importance weights, loss. ------------------------


def numpy_double_q_target(r, d, q_sel, q_eval):
  out = np.zeros(len(r))
  for i in range(len(r)):
    a = int(np.argmax(q_sel[i]))
    out[i] = r[i] + d[i] * q_eval[i, a]
  return out


def test_double_q_target_and_td_error_match_numpy():
  rng = np.random.default_rng(0)
  b, a = 16, 6
  q, q_sel, q_eval = (rng.normal(size=(b, a)).astype(np.float32)
                      for _ in range(3))
  r = rng.normal(size=b).astype(np.float32)
  d = (0.99**3 * rng.integers(0, 2, size=b)).astype(np.float32)
  actions = rng.integers(0, a, size=b)
  expected_g = numpy_double_q_target(r, d, q_sel, q_eval)
  np.testing.assert_allclose(
      targets.double_q_target(r, d, q_sel, q_eval), expected_g, rtol=1e-5,
      atol=1e-6)
  expected_td = expected_g - q[np.arange(b), actions]
  td = targets.double_q_td_error(q, actions, r, d, q_sel, q_eval)
  np.testing.assert_allclose(td, expected_td, rtol=1e-5, atol=1e-6)
  priorities = targets.priorities_from_td_errors(td)
  assert priorities.dtype == tf.float64
  np.testing.assert_allclose(priorities, np.abs(expected_td), rtol=1e-5,
                             atol=1e-6)
  # An actor holds one network: selector == evaluator reduces to max_a q.
  np.testing.assert_allclose(
      targets.double_q_target(r, d, q_eval, q_eval),
      r + d * q_eval.max(axis=1), rtol=1e-5, atol=1e-6)


def test_importance_weights_match_numpy():
  rng = np.random.default_rng(1)
  p = rng.dirichlet(np.ones(1000))[:32]
  n = 1000
  w = (n * p)**(-0.4)
  np.testing.assert_allclose(
      targets.importance_weights(p, n, 0.4), w / w.max(), rtol=1e-6)
  per_item_n = np.full(32, n)
  np.testing.assert_allclose(
      targets.importance_weights(p, per_item_n, 0.4), w / w.max(), rtol=1e-6)
  assert float(tf.reduce_max(targets.importance_weights(p, n, 0.4))) == 1.0
  np.testing.assert_allclose(targets.importance_weights(p, n, 0.0), 1.0)
  # Tiny probabilities in a 2M table do not overflow.
  w_big = targets.importance_weights(np.array([1e-12, 1e-9]), 2_000_000, 0.4)
  assert np.all(np.isfinite(w_big))


@pytest.mark.parametrize('beta', [0.05, 0.1, 0.4])
def test_importance_weights_of_a_zero_probability_item_are_finite(beta):
  # Reverb can return an item of priority 0 with P = 0; log(N * 0) = -inf
  # used to turn the whole batch into NaN.
  tiny = np.finfo(np.float64).tiny
  p = np.array([0.002, 0.0, 0.01, 0.0005, 0.03], np.float64)
  n = 1000
  w = targets.importance_weights(p, n, beta).numpy()
  assert w.dtype == np.float32 and np.all(np.isfinite(w))
  assert w.max() == 1.0 and w[1] == 1.0  # The P = 0 item weighs the most.
  # The others, relative to the floored item: (N P_i)^-beta / tiny^-beta.
  # For beta = 0.4 these are ~1e-123, 0 in float32.
  others = np.array([0, 2, 3, 4])
  reference = (n * p[others])**-beta / tiny**-beta
  np.testing.assert_allclose(w[others], reference.astype(np.float32),
                             rtol=1e-6)
  if beta < 0.2:
    assert np.all(w[others] > 0)
  # A batch of P = 0 items only (every priority 0): uniform weights.
  np.testing.assert_array_equal(
      targets.importance_weights(np.zeros(4), n, beta), np.ones(4))


def test_loss_is_weighted_half_squared_error():
  rng = np.random.default_rng(2)
  b, a = 8, 4
  q = tf.Variable(rng.normal(size=(b, a)).astype(np.float32))
  q_next_online = rng.normal(size=(b, a)).astype(np.float32)
  q_next_target = rng.normal(size=(b, a)).astype(np.float32)
  r = rng.normal(size=b).astype(np.float32)
  d = np.full(b, 0.97, np.float32)
  actions = rng.integers(0, a, size=b)
  w = rng.uniform(0.1, 1.0, size=b).astype(np.float32)
  with tf.GradientTape() as tape:
    out = targets.double_q_loss(q, actions, r, d, q_next_online,
                                q_next_target, w)
  delta = (numpy_double_q_target(r, d, q_next_online, q_next_target) -
           q.numpy()[np.arange(b), actions])
  assert float(out.loss) == pytest.approx(np.mean(w * 0.5 * delta**2),
                                          rel=1e-5)
  np.testing.assert_allclose(out.td_error, delta, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(out.priorities, np.abs(delta), rtol=1e-5,
                             atol=1e-6)
  # dL/dq(s_i, a_i) = -w_i delta_i / B; zero for other actions and no
  # gradient into the target.
  grad = tape.gradient(out.loss, q).numpy()
  expected = np.zeros((b, a), np.float32)
  expected[np.arange(b), actions] = -w * delta / b
  np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-7)
  unweighted = targets.double_q_loss(q, actions, r, d, q_next_online,
                                     q_next_target)
  assert float(unweighted.loss) == pytest.approx(np.mean(0.5 * delta**2),
                                                 rel=1e-5)


# --- Dueling network. -----------------------------------------------------


def _frames(batch, seed=0):
  return np.random.default_rng(seed).integers(
      0, 256, size=(batch, 84, 84, 4), dtype=np.uint8)


def test_network_shapes_and_uint8_scaling():
  net = dqn.DuelingDQN(num_actions=6)
  obs = _frames(3)
  q = net(obs)
  assert q.shape == (3, 6) and q.dtype == tf.float32
  embedding = net.torso(obs)
  assert embedding.shape == (3, dqn.NATURE_DQN_EMBEDDING_SIZE)
  # uint8 is scaled by 1/255 inside: same as feeding floats in [0, 1].
  np.testing.assert_allclose(
      net.torso(obs.astype(np.float32) / 255.0), embedding, rtol=1e-5,
      atol=1e-6)
  with pytest.raises(TypeError):
    net.torso(obs.astype(np.int32))


def test_dueling_aggregation_is_mean_subtracted():
  head = dqn.DuelingDQNHead(num_actions=5)
  emb = tf.constant(np.random.default_rng(3).normal(size=(4, 32)), tf.float32)
  value, advantages = head.value_and_advantages(emb)
  q = head(emb).numpy()
  v, adv = value.numpy(), advantages.numpy()
  np.testing.assert_allclose(q, v + adv - adv.mean(axis=1, keepdims=True),
                             rtol=1e-5, atol=1e-6)
  # The advantages of Q have mean zero: the mean of Q over actions is V.
  np.testing.assert_allclose(q.mean(axis=1), v[:, 0], rtol=1e-5, atol=1e-5)


def test_gradient_into_torso_is_scaled_by_one_over_sqrt2():
  emb = tf.constant(np.random.default_rng(4).normal(size=(4, 32)), tf.float32)
  scaled = dqn.DuelingDQNHead(num_actions=5)
  plain = dqn.DuelingDQNHead(num_actions=5, gradient_scale=None)
  scaled(emb), plain(emb)  # Create variables.
  for src, dst in zip(scaled.trainable_variables, plain.trainable_variables):
    assert src.name == dst.name
    dst.assign(src)

  def grads(head):
    with tf.GradientTape(persistent=True) as tape:
      tape.watch(emb)
      q = head(emb)
      loss = tf.reduce_sum(q * q)
    return (q, tape.gradient(loss, emb),
            tape.gradient(loss, head.trainable_variables))

  q_s, g_emb_s, g_vars_s = grads(scaled)
  q_p, g_emb_p, g_vars_p = grads(plain)
  # Forward pass untouched, bit for bit.
  np.testing.assert_array_equal(q_s.numpy(), q_p.numpy())
  # Gradient leaving the streams into the torso: times 1/sqrt(2).
  np.testing.assert_allclose(g_emb_s, g_emb_p / math.sqrt(2), rtol=1e-5,
                             atol=1e-7)
  # The streams' own parameters get their usual gradients.
  for gs, gp in zip(g_vars_s, g_vars_p):
    np.testing.assert_allclose(gs, gp, rtol=1e-5, atol=1e-7)


def test_scale_gradient_identity_forward_scaled_backward():
  x = tf.constant([1.0, -2.0, 3.0])
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = dqn.scale_gradient(x, 0.25)
    loss = tf.reduce_sum(3.0 * y)
  np.testing.assert_array_equal(y.numpy(), x.numpy())
  np.testing.assert_allclose(tape.gradient(loss, x), [0.75, 0.75, 0.75])


def test_network_and_loss_under_jit_compile():
  net = dqn.DuelingDQN(num_actions=4)
  obs = _frames(2, seed=5)
  eager_q = net(obs)
  batch = dict(
      action=np.array([0, 3], np.int32),
      reward=np.array([1.0, -1.0], np.float32),
      discount=np.array([0.97, 0.0], np.float32),
      weights=np.array([1.0, 0.5], np.float32))

  @tf.function(jit_compile=True)
  def forward(o):
    return net(o)

  @tf.function(jit_compile=True)
  def loss_and_grads(o, next_o, action, reward, discount, weights):
    with tf.GradientTape() as tape:
      q = net(o)
      q_next = net(next_o)
      out = targets.double_q_loss(q, action, reward, discount, q_next,
                                  tf.stop_gradient(q_next), weights)
    grads = tape.gradient(out.loss, net.trainable_variables)
    return out.loss, out.priorities, tf.linalg.global_norm(grads)

  np.testing.assert_allclose(forward(obs), eager_q, rtol=1e-4, atol=1e-5)
  loss, priorities, norm = loss_and_grads(obs, _frames(2, seed=6),
                                          **batch)
  assert np.isfinite(loss.numpy()) and np.isfinite(norm.numpy())
  assert priorities.shape == (2,)
