"""Tests of agents/impala/vtrace.py against references written out here.

The references are deliberately naive (explicit sums, plain loops, exact
expectations in NumPy float64) and share no code with the module, so a bug in
the module's recursion cannot hide in the reference too. Paper: IMPALA,
Espeholt et al. 2018, Section 4 and Appendix A.
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from agents.impala import vtrace

T, B, A = 6, 4, 3


def _clip(threshold, x):
  return x if threshold is None else np.minimum(threshold, x)


def _ref_vtrace(log_rhos, discounts, rewards, values, bootstrap_value,
                rho_bar=1.0, pg_rho_bar=1.0, c_bar=1.0, lambda_=1.0):
  """Eq. (1) as the explicit sum, with per-step discounts.

  v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t V,
  delta_t V = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t)).
  """
  log_rhos, discounts, rewards, values, bootstrap_value = (
      np.asarray(x, np.float64) for x in (log_rhos, discounts, rewards, values,
                                          bootstrap_value))
  n, batch = values.shape
  ratios = np.exp(log_rhos)
  rho = _clip(rho_bar, ratios)
  c = lambda_ * _clip(c_bar, ratios)
  rho_pg = _clip(pg_rho_bar, ratios)
  next_values = np.concatenate([values[1:], bootstrap_value[None]], axis=0)
  vs = np.zeros_like(values)
  for b in range(batch):
    for s in range(n):
      total = values[s, b]
      for t in range(s, n):
        weight = 1.0
        for i in range(s, t):
          weight *= discounts[i, b] * c[i, b]
        delta = rho[t, b] * (rewards[t, b] + discounts[t, b] * next_values[t, b]
                             - values[t, b])
        total += weight * delta
      vs[s, b] = total
  next_vs = np.concatenate([vs[1:], bootstrap_value[None]], axis=0)
  pg_advantages = rho_pg * (rewards + discounts * next_vs - values)
  return vs, pg_advantages


def _ref_n_step_returns(discounts, rewards, bootstrap_value):
  """Eq. (2): sum_t (prod gamma) r_t + (prod gamma) V(x_T), forward loop."""
  n, batch = rewards.shape
  returns = np.zeros((n, batch))
  for b in range(batch):
    for s in range(n):
      total, discount = 0.0, 1.0
      for t in range(s, n):
        total += discount * rewards[t, b]
        discount *= discounts[t, b]
      returns[s, b] = total + discount * bootstrap_value[b]
  return returns


def _log_softmax(logits):
  z = logits - logits.max(axis=-1, keepdims=True)
  return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _random_batch(seed, off_policy_scale=1.0):
  rng = np.random.default_rng(seed)
  discounts = np.full((T, B), 0.9)
  discounts[rng.random((T, B)) < 0.15] = 0.0  # Episode ends inside the unroll.
  return dict(
      log_rhos=off_policy_scale * rng.normal(size=(T, B)),
      discounts=discounts,
      rewards=rng.normal(size=(T, B)),
      values=rng.normal(size=(T, B)),
      bootstrap_value=rng.normal(size=(B,)),
  )


def _f32(batch):
  return {k: v.astype(np.float32) for k, v in batch.items()}


# (rho_bar, pg_rho_bar, c_bar, lambda): defaults, no clipping, and mixtures.
THRESHOLDS = [
    (1.0, 1.0, 1.0, 1.0),
    (None, None, None, 1.0),
    (2.0, 1.5, 0.5, 1.0),
    (1.0, 1.0, 1.0, 0.5),
    (None, 1.0, 1.0, 0.9),
    (0.7, None, 0.3, 0.0),
]


@pytest.mark.parametrize('rho_bar,pg_rho_bar,c_bar,lambda_', THRESHOLDS)
def test_matches_explicit_sum_of_eq1(rho_bar, pg_rho_bar, c_bar, lambda_):
  batch = _random_batch(seed=0)
  out = vtrace.from_importance_weights(
      **_f32(batch), clip_rho_threshold=rho_bar,
      clip_pg_rho_threshold=pg_rho_bar, clip_c_threshold=c_bar,
      lambda_=lambda_)
  ref_vs, ref_pg = _ref_vtrace(**batch, rho_bar=rho_bar, pg_rho_bar=pg_rho_bar,
                               c_bar=c_bar, lambda_=lambda_)
  np.testing.assert_allclose(out.vs.numpy(), ref_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(out.pg_advantages.numpy(), ref_pg, rtol=1e-5,
                             atol=1e-5)


def test_on_policy_reduces_to_n_step_bellman_target():
  batch = _random_batch(seed=1)
  batch['log_rhos'] = np.zeros((T, B))
  out = vtrace.from_importance_weights(**_f32(batch))
  returns = _ref_n_step_returns(batch['discounts'], batch['rewards'],
                                batch['bootstrap_value'])
  np.testing.assert_allclose(out.vs.numpy(), returns, rtol=1e-5, atol=1e-5)
  # On-policy with lambda = 1, v_s = r_s + gamma_s v_{s+1}: the advantage
  # q_s - V(x_s) is the n-step return minus the baseline (A3C's advantage).
  np.testing.assert_allclose(out.pg_advantages.numpy(),
                             returns - batch['values'], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('kwargs', [dict(clip_c_threshold=0.0),
                                    dict(lambda_=0.0)])
def test_on_policy_without_traces_is_one_step_td_target(kwargs):
  batch = _random_batch(seed=2)
  batch['log_rhos'] = np.zeros((T, B))
  out = vtrace.from_importance_weights(**_f32(batch), **kwargs)
  next_values = np.concatenate([batch['values'][1:],
                                batch['bootstrap_value'][None]])
  td_target = batch['rewards'] + batch['discounts'] * next_values
  np.testing.assert_allclose(out.vs.numpy(), td_target, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# Tabular MDP: the V-trace operator in expectation (Section 4.1, Appendix A).

GAMMA = 0.9


def _tabular_mdp(num_states=4, num_actions=2, seed=3):
  rng = np.random.default_rng(seed)
  p = rng.dirichlet(np.ones(num_states), size=(num_states, num_actions))
  r = rng.normal(size=(num_states, num_actions))
  mu = rng.dirichlet(np.ones(num_actions), size=num_states)
  pi = rng.dirichlet(np.ones(num_actions), size=num_states)
  return p, r, mu, pi


def _policy_value(p, r, policy):
  """V^policy by solving the linear Bellman system (I - gamma P_pi) V = r_pi."""
  p_pi = np.einsum('xa,xay->xy', policy, p)
  r_pi = np.einsum('xa,xa->x', policy, r)
  return np.linalg.solve(np.eye(len(r)) - GAMMA * p_pi, r_pi)


def _pi_rho_bar(mu, pi, rho_bar):
  """Eq. (3)."""
  unnormalised = np.minimum(rho_bar * mu, pi)
  return unnormalised / unnormalised.sum(axis=1, keepdims=True)


def _vtrace_operator(v, p, r, mu, pi, rho_bar, c_bar, lambda_, n=None):
  """Eq. (5) computed exactly: RV = V + sum_{t<n} M^t d.

  d(x) = E_mu[rho_0 (r_0 + gamma V(x_1) - V(x_0)) | x_0 = x] is the expected
  TD error; M(x, y) = gamma E_mu[c_0 1{x_1 = y} | x_0 = x] carries the trace
  gamma^t c_0 ... c_{t-1} one step forward. n=None is the infinite horizon.
  """
  ratio = pi / mu
  rho = np.minimum(rho_bar, ratio)
  c = lambda_ * np.minimum(c_bar, ratio)
  d = np.einsum('xa,xa->x', mu * rho, r + GAMMA * p @ v - v[:, None])
  m = GAMMA * np.einsum('xa,xay->xy', mu * c, p)
  if n is None:
    return v + np.linalg.solve(np.eye(len(v)) - m, d)
  correction, trace = np.zeros_like(v), np.eye(len(v))
  for _ in range(n):
    correction += trace @ d
    trace = trace @ m
  return v + correction


def _affine_fixed_point(operator, num_states):
  """The unique fixed point of an affine operator RV = K V + b."""
  b = operator(np.zeros(num_states))
  k = np.stack([operator(e) - b for e in np.eye(num_states)], axis=1)
  return np.linalg.solve(np.eye(num_states) - k, b)


@pytest.mark.parametrize('rho_bar', [1e6, 2.0, 1.0, 0.5])
@pytest.mark.parametrize('c_fraction,lambda_', [(1.0, 1.0), (0.5, 1.0),
                                                (1.0, 0.6), (0.0, 1.0)])
def test_tabular_operator_converges_to_v_pi_rho_bar(rho_bar, c_fraction,
                                                    lambda_):
  p, r, mu, pi = _tabular_mdp()
  c_bar = c_fraction * rho_bar  # The paper assumes rho_bar >= c_bar.
  expected = _policy_value(p, r, _pi_rho_bar(mu, pi, rho_bar))

  def operator(v):
    return _vtrace_operator(v, p, r, mu, pi, rho_bar, c_bar, lambda_)

  # Theorem 1: an eta-contraction, eta <= 1 - (1 - gamma) E_mu rho_0.
  beta = np.einsum('xa,xa->x', mu, np.minimum(rho_bar, pi / mu)).min()
  eta_bound = 1 - (1 - GAMMA) * beta
  rng = np.random.default_rng(4)
  v1, v2 = rng.normal(size=(2, len(r)))
  assert (np.abs(operator(v1) - operator(v2)).max()
          <= eta_bound * np.abs(v1 - v2).max() + 1e-12)

  v = np.zeros(len(r))
  for _ in range(2000):
    new_v = operator(v)
    if np.abs(new_v - v).max() < 1e-12:
      break
    v = new_v
  np.testing.assert_allclose(v, expected, atol=1e-9)
  # The fixed point depends on rho_bar only, not on c_bar or lambda (Rem. 3).
  np.testing.assert_allclose(_affine_fixed_point(operator, len(r)), expected,
                             atol=1e-9)


def test_tabular_fixed_point_lies_between_mu_and_pi():
  p, r, mu, pi = _tabular_mdp()
  v_pi, v_mu = _policy_value(p, r, pi), _policy_value(p, r, mu)
  assert np.abs(v_pi - v_mu).max() > 0.1  # The test needs distinct policies.

  def fixed_point(rho_bar):
    return _affine_fixed_point(
        lambda v: _vtrace_operator(v, p, r, mu, pi, rho_bar, rho_bar, 1.0),
        len(r))

  # rho_bar large: no effective truncation, V^pi.
  np.testing.assert_allclose(fixed_point(1e6), v_pi, atol=1e-9)
  # rho_bar = 1: V^{pi_1}, a policy between mu and pi, which is not V^pi.
  v_1 = fixed_point(1.0)
  assert np.abs(v_1 - v_pi).max() > 1e-2
  assert np.abs(v_1 - v_mu).max() > 1e-2
  # rho_bar small enough that rho_bar mu <= pi everywhere: pi_rho_bar = mu.
  rho_small = 0.5 * (pi / mu).min()
  np.testing.assert_allclose(_pi_rho_bar(mu, pi, rho_small), mu, atol=1e-12)
  np.testing.assert_allclose(fixed_point(rho_small), v_mu, atol=1e-8)


def test_module_expectation_equals_n_step_operator():
  """E_mu of the module's v_0 over every trajectory equals eq. (5) for n steps.

  All (a_0, x_1, ..., a_{n-1}, x_n) paths of a 3-state, 2-action MDP are
  enumerated as the batch and weighted by their exact probability under mu, so
  the comparison has no sampling error. At V = V^{pi_rho_bar} the expectation
  must return V itself (the fixed point of Section 4.1).
  """
  num_states, num_actions, n = 3, 2, 3
  p, r, mu, pi = _tabular_mdp(num_states, num_actions, seed=5)
  rho_bar, c_bar, lambda_ = 1.0, 0.8, 0.9
  paths, probs = [], []
  for x0 in range(num_states):
    for steps in itertools.product(
        itertools.product(range(num_actions), range(num_states)), repeat=n):
      states = [x0] + [x for _, x in steps]
      actions = [a for a, _ in steps]
      prob = 1.0
      for t, a in enumerate(actions):
        prob *= mu[states[t], a] * p[states[t], a, states[t + 1]]
      paths.append((states, actions))
      probs.append(prob)
  states = np.array([s for s, _ in paths]).T  # [n + 1, B]
  actions = np.array([a for _, a in paths]).T  # [n, B]
  probs = np.array(probs)
  x0 = states[0]
  log_rhos = (np.log(pi[states[:-1], actions])
              - np.log(mu[states[:-1], actions]))
  rewards = r[states[:-1], actions]
  discounts = np.full(rewards.shape, GAMMA)

  def expected_v0(v):
    out = vtrace.from_importance_weights(
        log_rhos.astype(np.float32), discounts.astype(np.float32),
        rewards.astype(np.float32), v[states[:-1]].astype(np.float32),
        v[states[-1]].astype(np.float32), clip_rho_threshold=rho_bar,
        clip_c_threshold=c_bar, lambda_=lambda_)
    weighted = probs * out.vs.numpy()[0].astype(np.float64)
    return np.array([weighted[x0 == x].sum() for x in range(num_states)])

  v = np.random.default_rng(6).normal(size=num_states)
  np.testing.assert_allclose(
      expected_v0(v),
      _vtrace_operator(v, p, r, mu, pi, rho_bar, c_bar, lambda_, n=n),
      atol=1e-5)
  v_fixed = _policy_value(p, r, _pi_rho_bar(mu, pi, rho_bar))
  np.testing.assert_allclose(expected_v0(v_fixed), v_fixed, atol=1e-5)


# ---------------------------------------------------------------------------
# from_logits, inputs, shapes, compilation.


def _random_logits_batch(seed):
  rng = np.random.default_rng(seed)
  batch = _random_batch(seed)
  del batch['log_rhos']
  batch['behaviour_policy_logits'] = rng.normal(size=(T, B, A))
  batch['target_policy_logits'] = rng.normal(size=(T, B, A))
  batch['actions'] = rng.integers(0, A, size=(T, B))
  return batch


def _logits_f32(batch):
  return {k: v if k == 'actions' else v.astype(np.float32)
          for k, v in batch.items()}


def test_from_logits_log_rhos_and_targets():
  batch = _random_logits_batch(seed=7)
  out = vtrace.from_logits(**_logits_f32(batch), clip_c_threshold=0.9,
                           lambda_=0.95)
  t_idx, b_idx = np.meshgrid(np.arange(T), np.arange(B), indexing='ij')
  target_lp = _log_softmax(batch['target_policy_logits'])[
      t_idx, b_idx, batch['actions']]
  behaviour_lp = _log_softmax(batch['behaviour_policy_logits'])[
      t_idx, b_idx, batch['actions']]
  np.testing.assert_allclose(out.target_action_log_probs.numpy(), target_lp,
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(out.behaviour_action_log_probs.numpy(),
                             behaviour_lp, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(out.log_rhos.numpy(), target_lp - behaviour_lp,
                             rtol=1e-5, atol=1e-5)
  ref_vs, ref_pg = _ref_vtrace(
      target_lp - behaviour_lp, batch['discounts'], batch['rewards'],
      batch['values'], batch['bootstrap_value'], c_bar=0.9, lambda_=0.95)
  np.testing.assert_allclose(out.vs.numpy(), ref_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(out.pg_advantages.numpy(), ref_pg, rtol=1e-5,
                             atol=1e-5)


def test_targets_carry_no_gradient_but_log_probs_do():
  batch = _logits_f32(_random_logits_batch(seed=8))
  values = tf.Variable(batch.pop('values'))
  logits = tf.Variable(batch.pop('target_policy_logits'))
  with tf.GradientTape(persistent=True) as tape:
    out = vtrace.from_logits(target_policy_logits=logits, values=values,
                             **batch)
    target_loss = tf.reduce_sum(out.vs) + tf.reduce_sum(out.pg_advantages)
    log_prob_loss = tf.reduce_sum(out.target_action_log_probs)
  assert tape.gradient(target_loss, [values, logits]) == [None, None]
  assert tape.gradient(log_prob_loss, logits) is not None


def test_numpy_and_tf_inputs_agree():
  batch = _random_batch(seed=9)
  from_numpy = vtrace.from_importance_weights(**_f32(batch))
  from_tf = vtrace.from_importance_weights(
      **{k: tf.constant(v) for k, v in _f32(batch).items()})
  # float64 NumPy input is converted to float32 as well.
  from_float64 = vtrace.from_importance_weights(**batch)
  for a, b in ((from_numpy, from_tf), (from_numpy, from_float64)):
    np.testing.assert_array_equal(a.vs.numpy(), b.vs.numpy())
    np.testing.assert_array_equal(a.pg_advantages.numpy(),
                                  b.pg_advantages.numpy())
  assert from_float64.vs.dtype == tf.float32

  logits_batch = _random_logits_batch(seed=10)
  np_out = vtrace.from_logits(**_logits_f32(logits_batch))
  tf_out = vtrace.from_logits(
      **{k: tf.constant(v) for k, v in _logits_f32(logits_batch).items()})
  for a, b in zip(np_out, tf_out):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_runs_under_xla_and_unknown_shapes():
  batch = _f32(_random_batch(seed=11))
  eager = vtrace.from_importance_weights(**batch, clip_c_threshold=0.5,
                                         lambda_=0.9)
  compiled = tf.function(
      lambda **kw: vtrace.from_importance_weights(**kw, clip_c_threshold=0.5,
                                                  lambda_=0.9),
      jit_compile=True)
  for a, b in zip(eager, compiled(**batch)):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)

  tb = tf.TensorSpec([None, None], tf.float32)
  dynamic = tf.function(
      vtrace.from_importance_weights,
      input_signature=[tb, tb, tb, tb, tf.TensorSpec([None], tf.float32)],
      jit_compile=True)
  out = dynamic(batch['log_rhos'], batch['discounts'], batch['rewards'],
                batch['values'], batch['bootstrap_value'])
  default = vtrace.from_importance_weights(**batch)
  np.testing.assert_allclose(out.vs.numpy(), default.vs.numpy(), rtol=1e-5,
                             atol=1e-5)

  logits_batch = _logits_f32(_random_logits_batch(seed=12))
  eager_logits = vtrace.from_logits(**logits_batch)
  compiled_logits = tf.function(vtrace.from_logits, jit_compile=True)(
      **logits_batch)
  for a, b in zip(eager_logits, compiled_logits):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def _bad(batch, **changes):
  bad = dict(batch)
  bad.update(changes)
  return bad


@pytest.mark.parametrize('name,bad_value,expected', [
    ('rewards', np.zeros((T, B + 1)), r'rewards.*\[6, 4\].*\[6, 5\]'),
    ('discounts', np.zeros((B, T)), r'discounts.*\[6, 4\].*\[4, 6\]'),
    ('log_rhos', np.zeros((T, B, A)), r'log_rhos.*rank 2.*\[6, 4, 3\]'),
    ('bootstrap_value', np.zeros((T, B)),
     r'bootstrap_value.*rank 1.*\[6, 4\]'),
    ('bootstrap_value', np.zeros((B + 2,)), r'bootstrap_value.*\[4\].*\[6\]'),
    ('values', np.zeros((T,)), r'values.*rank 2.*\[6\]'),
    ('clip_rho_threshold', np.ones(2), r'clip_rho_threshold.*scalar'),
])
def test_from_importance_weights_shape_errors(name, bad_value, expected):
  batch = _random_batch(seed=13)
  with pytest.raises(ValueError, match=expected):
    vtrace.from_importance_weights(**_bad(batch, **{name: bad_value}))


@pytest.mark.parametrize('name,bad_value,expected', [
    ('target_policy_logits', np.zeros((T, B)),
     r'target_policy_logits.*rank 3.*\[6, 4\]'),
    ('behaviour_policy_logits', np.zeros((T, B, A + 1)),
     r'behaviour_policy_logits.*\[6, 4, 3\].*\[6, 4, 4\]'),
    ('actions', np.zeros((T, B, 1), np.int32), r'actions.*rank 2.*\[6, 4, 1\]'),
    ('actions', np.zeros((T + 1, B), np.int32), r'actions.*\[6, 4\].*\[7, 4\]'),
    ('actions', np.zeros((T, B), np.float32), r'actions.*integer'),
    ('rewards', np.zeros((T - 1, B)), r'rewards.*\[6, 4\].*\[5, 4\]'),
])
def test_from_logits_shape_errors(name, bad_value, expected):
  batch = _random_logits_batch(seed=14)
  with pytest.raises(ValueError, match=expected):
    vtrace.from_logits(**_bad(batch, **{name: bad_value}))


# ---------------------------------------------------------------------------
# Table 2's corrections.


def test_corrections_follow_section_5_2_2():
  batch = _random_batch(seed=15)
  returns = _ref_n_step_returns(batch['discounts'], batch['rewards'],
                                batch['bootstrap_value'])
  next_returns = np.concatenate([returns[1:], batch['bootstrap_value'][None]])
  uncorrected_adv = (batch['rewards'] + batch['discounts'] * next_returns
                     - batch['values'])
  out = {c: vtrace.compute_targets(c, **_f32(batch))
         for c in vtrace.CORRECTIONS}
  assert set(out) == {'vtrace', 'one_step_is', 'epsilon_correction', 'none'}

  ref_vs, ref_pg = _ref_vtrace(**batch)
  np.testing.assert_allclose(out['vtrace'].vs.numpy(), ref_vs, rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_allclose(out['vtrace'].pg_advantages.numpy(), ref_pg,
                             rtol=1e-5, atol=1e-5)
  for name in ('none', 'epsilon_correction', 'one_step_is'):
    # "No off-policy correction when optimising V(x)": plain n-step returns.
    np.testing.assert_allclose(out[name].vs.numpy(), returns, rtol=1e-5,
                               atol=1e-5)
  for name in ('none', 'epsilon_correction'):
    np.testing.assert_allclose(out[name].pg_advantages.numpy(),
                               uncorrected_adv, rtol=1e-5, atol=1e-5)
  # "multiply the advantage at each time step by the corresponding importance
  # weight", clipped at 1.
  np.testing.assert_allclose(
      out['one_step_is'].pg_advantages.numpy(),
      np.minimum(1.0, np.exp(batch['log_rhos'])) * uncorrected_adv,
      rtol=1e-5, atol=1e-5)
  # On off-policy data the corrections are not all the same thing.
  assert np.abs(out['none'].vs.numpy() - out['vtrace'].vs.numpy()).max() > 1e-2
  assert np.abs(out['none'].pg_advantages.numpy()
                - out['one_step_is'].pg_advantages.numpy()).max() > 1e-2
  assert np.abs(out['vtrace'].pg_advantages.numpy()
                - out['one_step_is'].pg_advantages.numpy()).max() > 1e-2


@pytest.mark.parametrize('thresholds', [dict(), dict(clip_rho_threshold=None,
                                                     clip_pg_rho_threshold=None,
                                                     clip_c_threshold=None),
                                        dict(lambda_=0.8)])
def test_all_corrections_agree_on_policy(thresholds):
  batch = _f32(_random_batch(seed=16))
  batch['log_rhos'] = np.zeros((T, B), np.float32)
  reference = vtrace.from_importance_weights(**batch, **thresholds)
  for name in vtrace.CORRECTIONS:
    out = vtrace.compute_targets(name, **batch, **thresholds)
    np.testing.assert_allclose(out.vs.numpy(), reference.vs.numpy(),
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out.pg_advantages.numpy(),
                               reference.pg_advantages.numpy(), rtol=1e-6,
                               atol=1e-6)


def test_unknown_correction_names_the_valid_ones():
  batch = _random_batch(seed=17)
  with pytest.raises(ValueError, match='retrace') as info:
    vtrace.compute_targets('retrace', **batch)
  for name in vtrace.CORRECTIONS:
    assert repr(name) in str(info.value)
  with pytest.raises(ValueError, match='vtrace'):
    vtrace.policy_gradient_log_probs('v-trace', np.zeros((T, B, A)),
                                     np.zeros((T, B), np.int32))


def test_compute_targets_under_xla():
  batch = _f32(_random_batch(seed=18))
  for name in vtrace.CORRECTIONS:
    eager = vtrace.compute_targets(name, **batch)
    compiled = tf.function(lambda kw, n=name: vtrace.compute_targets(n, **kw),
                           jit_compile=True)(batch)
    for a, b in zip(eager, compiled):
      np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_epsilon_correction_log_probs():
  rng = np.random.default_rng(19)
  logits = rng.normal(size=(T, B, A))
  logits[0, 0, 1] = -60.0  # pi(a) ~ 1e-27: log pi(a) would be about -60.
  actions = rng.integers(0, A, size=(T, B))
  actions[0, 0] = 1
  t_idx, b_idx = np.meshgrid(np.arange(T), np.arange(B), indexing='ij')
  exact = _log_softmax(logits)[t_idx, b_idx, actions]
  with_epsilon = np.log(np.exp(exact) + 1e-6)
  out = vtrace.policy_gradient_log_probs('epsilon_correction',
                                         logits.astype(np.float32), actions)
  np.testing.assert_allclose(out.numpy(), with_epsilon, rtol=1e-5, atol=1e-5)
  assert out.numpy()[0, 0] > np.log(1e-6) - 1e-3  # Bounded below by log eps.
  for name in ('vtrace', 'one_step_is', 'none'):
    out = vtrace.policy_gradient_log_probs(name, logits.astype(np.float32),
                                           actions)
    np.testing.assert_allclose(out.numpy(), exact, rtol=1e-5, atol=1e-4)
