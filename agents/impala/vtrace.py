"""V-trace off-policy actor-critic targets, and the corrections IMPALA compares.

Reference: "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
Actor-Learner Architectures", Espeholt, Soyer, Munos et al., ICML 2018
(arXiv:1802.01561), Section 4 ("V-trace") and Section 5.2.2 / Table 2
("V-trace Analysis").

Why this module exists: IMPALA's actors act with a policy mu that lags behind
the learner's policy pi by several updates, so the learner's data is
off-policy. V-trace (eq. 1) corrects for that lag with truncated importance
weights. The released agent (github.com/deepmind/scalable_agent, vtrace.py)
fixes the trace-cutting level c_bar to 1 and has no lambda; here both are
arguments (Section 4.1 and Remark 2) so the ablations of the paper can be run,
with defaults that reproduce the released code exactly.

Conventions (as in the released code): every tensor is time-major. T is the
unroll length, B the batch size, A the number of actions.

  log_rhos, discounts, rewards, values: [T, B]
  bootstrap_value: [B], the value estimate V(x_T) of the state after the unroll
  behaviour/target policy logits: [T, B, A]; actions: [T, B], integer

`discounts[t]` is the per-step discount gamma_t applied when bootstrapping from
x_{t+1} (e.g. gamma * (1 - done_t)); the paper's gamma^{t-s} becomes the product
gamma_s ... gamma_{t-1}, which is what lets episode ends inside an unroll cut
the return.

All returned targets carry `tf.stop_gradient`: they are regression targets and
fixed advantages, never differentiated through (as in the released code).
"""

import collections
from typing import Optional, Union

import numpy as np
import tensorflow as tf

TensorLike = Union[tf.Tensor, np.ndarray, float]

VTraceReturns = collections.namedtuple('VTraceReturns', 'vs pg_advantages')

VTraceFromLogitsReturns = collections.namedtuple(
    'VTraceFromLogitsReturns',
    ['vs', 'pg_advantages', 'log_rhos', 'behaviour_action_log_probs',
     'target_action_log_probs'])

# The four off-policy corrections compared in IMPALA Table 2 (Section 5.2.2).
VTRACE = 'vtrace'
ONE_STEP_IS = 'one_step_is'
EPSILON_CORRECTION = 'epsilon_correction'
NO_CORRECTION = 'none'
CORRECTIONS = (VTRACE, ONE_STEP_IS, EPSILON_CORRECTION, NO_CORRECTION)

# Section 5.2.2: "Add a small value (epsilon = 1e-6) during gradient
# calculation to prevent log pi(a) from becoming very small".
DEFAULT_EPSILON = 1e-6


def _shape_str(shape: tf.TensorShape) -> str:
  if shape.rank is None:
    return '<unknown rank>'
  return '[' + ', '.join('?' if d is None else str(d)
                         for d in shape.as_list()) + ']'


def _check_rank(name: str, tensor: tf.Tensor, rank: int, layout: str):
  """Raises a ValueError naming `name` when its static rank is not `rank`."""
  if tensor.shape.rank is not None and tensor.shape.rank != rank:
    raise ValueError(
        f'{name} must have rank {rank} ({layout}), got shape '
        f'{_shape_str(tensor.shape)} of rank {tensor.shape.rank}.')


def _check_shape(name: str, tensor: tf.Tensor, expected: tf.TensorShape,
                 layout: str):
  """Raises a ValueError naming `name` when its static shape is incompatible.

  Only statically known dimensions are compared, so the check costs nothing at
  run time and still allows unknown T or B inside a `tf.function`.
  """
  _check_rank(name, tensor, expected.rank, layout)
  if not tensor.shape.is_compatible_with(expected):
    raise ValueError(
        f'{name} must have shape {layout} = {_shape_str(expected)}, got '
        f'{_shape_str(tensor.shape)}.')


def _threshold(name: str, value: Optional[TensorLike]) -> Optional[tf.Tensor]:
  if value is None:
    return None
  value = tf.convert_to_tensor(value, dtype=tf.float32)
  if value.shape.rank is not None and value.shape.rank != 0:
    raise ValueError(f'{name} must be a scalar or None, got shape '
                     f'{_shape_str(value.shape)}.')
  return value


def _clip(threshold: Optional[tf.Tensor], rhos: tf.Tensor) -> tf.Tensor:
  return rhos if threshold is None else tf.minimum(threshold, rhos)


def log_probs_from_logits_and_actions(
    policy_logits: TensorLike,
    actions: TensorLike,
    epsilon: Optional[float] = None) -> tf.Tensor:
  """log pi(a_t | x_t) of the taken actions under a softmax policy.

  Args:
    policy_logits: [T, B, A] unnormalised log-probabilities.
    actions: [T, B] integer actions.
    epsilon: if given, returns log(pi(a) + epsilon) instead of log pi(a): the
      epsilon-correction of Section 5.2.2 (see `policy_gradient_log_probs`).

  Returns:
    [T, B] float32 log-probabilities. Differentiable w.r.t. `policy_logits`
    (this is what the policy-gradient loss differentiates).
  """
  policy_logits = tf.convert_to_tensor(policy_logits, dtype=tf.float32)
  actions = _integer_actions(actions)
  _check_rank('policy_logits', policy_logits, 3, '[T, B, A]')
  _check_shape('actions', actions, policy_logits.shape[:2], '[T, B]')
  if epsilon is None:
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(
        logits=policy_logits, labels=actions)
  probs = tf.gather(tf.nn.softmax(policy_logits), actions, batch_dims=2)
  return tf.math.log(probs + epsilon)


def _integer_actions(actions: TensorLike) -> tf.Tensor:
  """Actions as int32; rejects float actions instead of silently truncating."""
  actions = tf.convert_to_tensor(actions)
  if not actions.dtype.is_integer:
    raise ValueError(
        f'actions must be integers, got dtype {actions.dtype.name}.')
  return tf.cast(actions, tf.int32)


def from_importance_weights(
    log_rhos: TensorLike,
    discounts: TensorLike,
    rewards: TensorLike,
    values: TensorLike,
    bootstrap_value: TensorLike,
    clip_rho_threshold: Optional[TensorLike] = 1.0,
    clip_pg_rho_threshold: Optional[TensorLike] = 1.0,
    clip_c_threshold: Optional[TensorLike] = 1.0,
    lambda_: TensorLike = 1.0) -> VTraceReturns:
  r"""V-trace targets and policy-gradient advantages from log IS weights.

  Value targets, eq. (1):
    v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t V,
    delta_t V = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t)),
    rho_t = min(rho_bar, pi/mu),  c_i = lambda * min(c_bar, pi/mu)  (Remark 2).
  computed backwards with the recursion of Remark 1,
    v_s - V(x_s) = delta_s V + gamma_s c_s (v_{s+1} - V(x_{s+1})),
  and v_T = V(x_T) = bootstrap_value (the sum is empty at s = T).

  Policy-gradient advantage (Section 4.2, "V-trace actor-critic algorithm"):
    rho_pg_s (r_s + gamma_s v_{s+1} - V(x_s)), rho_pg_s = min(rho_pg_bar, pi/mu)
  using q_s = r_s + gamma_s v_{s+1} rather than v_s because, with V exact,
  E[q_s | x_s, a_s] = Q^{pi_rho_bar}(x_s, a_s) (Section 4.2).

  The paper assumes rho_bar >= c_bar (Section 4.1; Theorem 1 needs it for the
  contraction); this is not enforced, as in the released code.

  The scan is a `tf.scan(reverse=True)`, so this runs inside `tf.function`,
  including `jit_compile=True` (XLA), with T and B possibly unknown statically.

  Args:
    log_rhos: [T, B] log(pi(a_t|x_t) / mu(a_t|x_t)). Kept in log space (as in
      the released code) so that callers can form it as a difference of
      log-probabilities without under/overflow.
    discounts: [T, B] per-step discounts gamma_t.
    rewards: [T, B] rewards r_t.
    values: [T, B] value estimates V(x_t).
    bootstrap_value: [B] value estimate V(x_T).
    clip_rho_threshold: rho_bar for delta_t V; None means no clipping.
    clip_pg_rho_threshold: clipping of rho_s in the policy-gradient advantage;
      None means no clipping.
    clip_c_threshold: c_bar for the trace coefficients; None means no clipping.
      The released code hard-codes 1.
    lambda_: Remark 2's lambda in [0, 1], multiplying every c_i; 1 gives eq.
      (1).

  Returns:
    VTraceReturns(vs=[T, B], pg_advantages=[T, B]), both under stop_gradient.

  Raises:
    ValueError: if a rank or a statically known shape does not match.
  """
  log_rhos = tf.convert_to_tensor(log_rhos, dtype=tf.float32)
  discounts = tf.convert_to_tensor(discounts, dtype=tf.float32)
  rewards = tf.convert_to_tensor(rewards, dtype=tf.float32)
  values = tf.convert_to_tensor(values, dtype=tf.float32)
  bootstrap_value = tf.convert_to_tensor(bootstrap_value, dtype=tf.float32)
  clip_rho_threshold = _threshold('clip_rho_threshold', clip_rho_threshold)
  clip_pg_rho_threshold = _threshold('clip_pg_rho_threshold',
                                     clip_pg_rho_threshold)
  clip_c_threshold = _threshold('clip_c_threshold', clip_c_threshold)
  lambda_ = tf.convert_to_tensor(lambda_, dtype=tf.float32)
  if lambda_.shape.rank is not None and lambda_.shape.rank != 0:
    raise ValueError(f'lambda_ must be a scalar, got shape '
                     f'{_shape_str(lambda_.shape)}.')

  # Static checks: a [T, B] vs [B, T] or a missing bootstrap dimension would
  # otherwise broadcast silently into wrong targets.
  _check_rank('values', values, 2, '[T, B]')
  _check_shape('log_rhos', log_rhos, values.shape, '[T, B] like values')
  _check_shape('discounts', discounts, values.shape, '[T, B] like values')
  _check_shape('rewards', rewards, values.shape, '[T, B] like values')
  _check_shape('bootstrap_value', bootstrap_value, values.shape[1:],
               '[B] like values[0]')

  # Targets are constants for the learner: cut gradients at the inputs, so no
  # gradient graph is built for the scan at all.
  log_rhos, discounts, rewards, values, bootstrap_value = (
      tf.stop_gradient(x) for x in (log_rhos, discounts, rewards, values,
                                    bootstrap_value))

  rhos = tf.exp(log_rhos)
  clipped_rhos = _clip(clip_rho_threshold, rhos)  # rho_t, Section 4.1.
  cs = lambda_ * _clip(clip_c_threshold, rhos)  # c_i, Section 4.1 + Remark 2.

  # [V(x_1), ..., V(x_T)] with V(x_T) the bootstrap value.
  values_t_plus_1 = tf.concat([values[1:], bootstrap_value[None]], axis=0)
  deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)

  # Remark 1, backwards from v_T - V(x_T) = 0.
  def step(acc, elems):
    discount_t, c_t, delta_t = elems
    return delta_t + discount_t * c_t * acc

  vs_minus_v_xs = tf.scan(
      step, (discounts, cs, deltas),
      initializer=tf.zeros_like(bootstrap_value),
      reverse=True)
  vs = vs_minus_v_xs + values

  # Section 4.2: advantage rho_s (r_s + gamma_s v_{s+1} - V(x_s)), v_T = V(x_T).
  vs_t_plus_1 = tf.concat([vs[1:], bootstrap_value[None]], axis=0)
  clipped_pg_rhos = _clip(clip_pg_rho_threshold, rhos)
  pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_t_plus_1 - values)

  return VTraceReturns(vs=tf.stop_gradient(vs),
                       pg_advantages=tf.stop_gradient(pg_advantages))


def from_logits(
    behaviour_policy_logits: TensorLike,
    target_policy_logits: TensorLike,
    actions: TensorLike,
    discounts: TensorLike,
    rewards: TensorLike,
    values: TensorLike,
    bootstrap_value: TensorLike,
    clip_rho_threshold: Optional[TensorLike] = 1.0,
    clip_pg_rho_threshold: Optional[TensorLike] = 1.0,
    clip_c_threshold: Optional[TensorLike] = 1.0,
    lambda_: TensorLike = 1.0) -> VTraceFromLogitsReturns:
  """V-trace for softmax policies: log_rhos = log pi(a_t) - log mu(a_t).

  The behaviour policy mu is the actor's (lagging) policy that chose `actions`;
  the target policy pi is the learner's current policy (Section 3).

  Args:
    behaviour_policy_logits: [T, B, A] logits of mu.
    target_policy_logits: [T, B, A] logits of pi.
    actions: [T, B] integer actions sampled from mu.
    discounts, rewards, values, bootstrap_value, clip_rho_threshold,
    clip_pg_rho_threshold, clip_c_threshold, lambda_: as in
      `from_importance_weights`.

  Returns:
    VTraceFromLogitsReturns. `vs` and `pg_advantages` are under stop_gradient;
    the log-probabilities are not (`target_action_log_probs` can feed the
    policy-gradient loss directly).

  Raises:
    ValueError: if a rank or a statically known shape does not match.
  """
  behaviour_policy_logits = tf.convert_to_tensor(behaviour_policy_logits,
                                                 dtype=tf.float32)
  target_policy_logits = tf.convert_to_tensor(target_policy_logits,
                                              dtype=tf.float32)
  actions = _integer_actions(actions)
  _check_rank('target_policy_logits', target_policy_logits, 3, '[T, B, A]')
  _check_shape('behaviour_policy_logits', behaviour_policy_logits,
               target_policy_logits.shape,
               '[T, B, A] like target_policy_logits')
  _check_shape('actions', actions, target_policy_logits.shape[:2],
               '[T, B] like target_policy_logits[..., 0]')

  target_action_log_probs = log_probs_from_logits_and_actions(
      target_policy_logits, actions)
  behaviour_action_log_probs = log_probs_from_logits_and_actions(
      behaviour_policy_logits, actions)
  log_rhos = target_action_log_probs - behaviour_action_log_probs
  vtrace_returns = from_importance_weights(
      log_rhos=log_rhos,
      discounts=discounts,
      rewards=rewards,
      values=values,
      bootstrap_value=bootstrap_value,
      clip_rho_threshold=clip_rho_threshold,
      clip_pg_rho_threshold=clip_pg_rho_threshold,
      clip_c_threshold=clip_c_threshold,
      lambda_=lambda_)
  return VTraceFromLogitsReturns(
      vs=vtrace_returns.vs,
      pg_advantages=vtrace_returns.pg_advantages,
      log_rhos=log_rhos,
      behaviour_action_log_probs=behaviour_action_log_probs,
      target_action_log_probs=target_action_log_probs)


def _validate_correction(correction: str):
  if correction not in CORRECTIONS:
    raise ValueError(
        f'Unknown off-policy correction {correction!r}; valid names are '
        f'{", ".join(repr(c) for c in CORRECTIONS)}.')


def compute_targets(
    correction: str,
    log_rhos: TensorLike,
    discounts: TensorLike,
    rewards: TensorLike,
    values: TensorLike,
    bootstrap_value: TensorLike,
    clip_rho_threshold: Optional[TensorLike] = 1.0,
    clip_pg_rho_threshold: Optional[TensorLike] = 1.0,
    clip_c_threshold: Optional[TensorLike] = 1.0,
    lambda_: TensorLike = 1.0) -> VTraceReturns:
  """Value targets and policy-gradient advantages for one of Table 2's methods.

  Section 5.2.2 of the paper defines the four variants as:

    "1. No-correction - No off-policy correction.
     2. epsilon-correction - Add a small value (epsilon=1e-6) during gradient
        calculation to prevent log pi(a) from becoming very small and leading to
        numerical instabilities, similar to (Babaeizadeh et al., 2016).
     3. 1-step importance sampling - No off-policy correction when optimising
        V(x). For the policy gradient, multiply the advantage at each time step
        by the corresponding importance weight. This variant is similar to
        V-trace without "traces" and is included to investigate the importance
        of "traces" in V-trace.
     4. V-trace as described in Section 4."

  and: "For V-trace and 1-step importance sampling we clip each importance
  weight rho_t and c_t at 1 (i.e. c_bar = rho_bar = 1)."

  What each name computes here:
    'vtrace': `from_importance_weights` with the given thresholds and lambda.
    'none': the data are treated as on-policy (log_rhos ignored): vs are the
      uncorrected n-step Bellman targets, eq. (2) (TD(lambda) returns if
      lambda_ < 1, Remark 2), and pg_advantages = r_s + gamma_s v_{s+1} - V(x_s)
      with no importance weight. All clipping thresholds are ignored.
    'epsilon_correction': the same targets as 'none'. The paper's epsilon acts
      on log pi(a) in the policy-gradient term, not on the targets; get those
      log-probabilities from `policy_gradient_log_probs`.
    'one_step_is': vs as for 'none' ("no off-policy correction when optimising
      V(x)"); pg_advantages = min(clip_pg_rho_threshold, pi/mu) *
      (r_s + gamma_s v_{s+1} - V(x_s)) with the same uncorrected v. The weight
      rho_s multiplies only its own time step's advantage, it is never carried
      along a trace.

  Choices where the paper is silent (flagged):
    - The advantage of 'none' / 'epsilon_correction' / 'one_step_is' uses the
      same q_s = r_s + gamma_s v_{s+1} as V-trace (Section 4.2), with v the
      uncorrected returns. For lambda_ = 1 this equals the A3C advantage
      v_s - V(x_s), because then v_s = r_s + gamma_s v_{s+1} exactly.
    - 'one_step_is' clips its weight with `clip_pg_rho_threshold` (1 by
      default, per the quote above); `clip_rho_threshold` and
      `clip_c_threshold` have no role there since its value targets carry no
      weights.
    - lambda_ is honoured by every variant's value targets (the paper's Table 2
      runs use lambda = 1, the default).

  With on-policy data (log_rhos = 0) and thresholds >= 1 (or None), all four
  variants return the same targets: V-trace reduces to eq. (2) (Section 4.1).

  Args:
    correction: one of `CORRECTIONS`.
    log_rhos, discounts, rewards, values, bootstrap_value, clip_rho_threshold,
    clip_pg_rho_threshold, clip_c_threshold, lambda_: as in
      `from_importance_weights`.

  Returns:
    VTraceReturns(vs, pg_advantages), both [T, B] under stop_gradient.

  Raises:
    ValueError: on an unknown correction name (listing the valid ones) or on
      mismatched shapes.
  """
  _validate_correction(correction)
  if correction == VTRACE:
    return from_importance_weights(
        log_rhos, discounts, rewards, values, bootstrap_value,
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
        clip_c_threshold=clip_c_threshold,
        lambda_=lambda_)

  # Uncorrected targets: V-trace with every weight exactly 1 (log_rhos = 0 and
  # no clipping) is eq. (2), the on-policy n-step Bellman target.
  log_rhos = tf.convert_to_tensor(log_rhos, dtype=tf.float32)
  uncorrected = from_importance_weights(
      tf.zeros_like(log_rhos), discounts, rewards, values, bootstrap_value,
      clip_rho_threshold=None,
      clip_pg_rho_threshold=None,
      clip_c_threshold=None,
      lambda_=lambda_)
  if correction in (NO_CORRECTION, EPSILON_CORRECTION):
    return uncorrected

  # ONE_STEP_IS: the one-step weight rho_s on the policy-gradient term only
  # (log_rhos' shape was checked above through tf.zeros_like(log_rhos)).
  rhos = tf.exp(tf.stop_gradient(log_rhos))
  clipped_pg_rhos = _clip(_threshold('clip_pg_rho_threshold',
                                     clip_pg_rho_threshold), rhos)
  return VTraceReturns(
      vs=uncorrected.vs,
      pg_advantages=tf.stop_gradient(clipped_pg_rhos *
                                     uncorrected.pg_advantages))


def policy_gradient_log_probs(
    correction: str,
    target_policy_logits: TensorLike,
    actions: TensorLike,
    epsilon: float = DEFAULT_EPSILON) -> tf.Tensor:
  """log pi(a_s | x_s) for the policy-gradient term, per correction.

  For 'epsilon_correction' this is log(pi(a_s|x_s) + epsilon): Section 5.2.2
  adds epsilon = 1e-6 "during gradient calculation to prevent log pi(a) from
  becoming very small", as GA3C (Babaeizadeh et al., 2016) adds it to pi
  inside the log. For every other correction it is the exact log pi(a_s|x_s).
  Paper silent (flagged): whether epsilon also enters the entropy bonus; this
  function only covers the policy-gradient log-probability.

  Args:
    correction: one of `CORRECTIONS`.
    target_policy_logits: [T, B, A] logits of the learner's policy pi.
    actions: [T, B] integer actions.
    epsilon: the epsilon of 'epsilon_correction'; unused otherwise.

  Returns:
    [T, B] float32, differentiable w.r.t. `target_policy_logits`.

  Raises:
    ValueError: on an unknown correction name or mismatched shapes.
  """
  _validate_correction(correction)
  return log_probs_from_logits_and_actions(
      target_policy_logits, actions,
      epsilon=epsilon if correction == EPSILON_CORRECTION else None)
