"""Ape-X DQN's learning math, shared by actors and the learner.

Section 3.1 of Ape-X (arXiv:1803.00933): double Q-learning with n-step
returns and no off-policy correction,

  l_t(theta) = 1/2 (G_t - q(S_t, A_t; theta))^2,
  G_t = R_{t+1} + gamma R_{t+2} + ... + gamma^{n-1} R_{t+n}
        + gamma^n q(S_{t+n}, argmax_a q(S_{t+n}, a; theta); theta^-),

truncated when the episode ends before n steps. Priorities are the absolute
n-step TD errors |G_t - q(S_t, A_t)| (Sec. 3, App. F), sampled in proportion to
p^alpha and corrected with importance weights (N P(i))^-beta normalised by
their maximum (Schaul et al. 2016, Sec. 3.4).

Why one module for actors and learner: the actors compute the initial
priorities of their transitions (Sec. 3, App. F "Adding Data") and the
learner recomputes them after each update. Both call `double_q_td_error`, so
for the same parameters and data the two priorities are identical: the actor
passes its single network's Q-values as both the selector and the evaluator
(it holds no target network), the learner passes online and target.

`NStepAccumulator` is plain Python/numpy (one per actor environment); the
rest are TF functions that accept numpy inputs and compile under
`tf.function(jit_compile=True)`.
"""

import collections
import dataclasses
from typing import Any, Deque, List, NamedTuple, Optional, Union

import numpy as np
import tensorflow as tf

TensorLike = Union[tf.Tensor, np.ndarray, float]


# ---------------------------------------------------------------------------
# n-step transitions (App. F, "Adding Data").
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NStepTransition:
  """One replay entry (S_t, A_t, R_{t:t+k}, gamma_{t:t+k}, S_{t+k}) (App. F).

  Attributes:
    observation: S_t (whatever the actor passed: raw frames or PNG bytes).
    action: A_t.
    reward: partial return R_{t:t+k} = sum_{j<k} gamma_{t:t+j} r_{t+j+1}.
    discount: accumulated discount gamma_{t:t+k} = prod_{j=1..k} gamma d_{t+j},
      0 when the episode terminated within the k steps; the target bootstraps
      with it, so a terminal transition needs no separate `done` flag.
    next_observation: S_{t+k}.
    num_steps: k; n, or fewer for the last transitions of an episode.
    step: t, counted over the accumulator's lifetime (all episodes). With the
      actor's id it is the transition's provenance (App. F: each key "records
      which actor and environment step it came from").
    extras: what the actor attached to S_t (App. F buffers q(S_t, *)).
    next_extras: what the actor attached to S_{t+k} (e.g. q(S_{t+k}, *)), so
      initial priorities need no second forward pass.
  """
  observation: Any
  action: Any
  reward: float
  discount: float
  next_observation: Any
  num_steps: int
  step: int
  extras: Any = None
  next_extras: Any = None


@dataclasses.dataclass
class _Pending:
  observation: Any
  action: Any
  extras: Any
  step: int
  reward: float = 0.0
  discount: float = 1.0
  num_steps: int = 0


class NStepAccumulator:
  """Turns an actor's stream of steps into n-step transitions as they arrive.

  The circular buffer of App. F: each new step updates the partial return
  and accumulated discount of every pending entry; once the oldest entry has
  seen n rewards it is emitted with the latest state as S_{t+n}. At the end
  of an episode the remaining (shorter) entries are emitted, bootstrapping
  from the final state with their accumulated discount (0 after a terminal
  step, gamma^k after a time-limit truncation where the env's discount is 1).

  Usage, with dm_env conventions (discount 0 on termination):

    acc = NStepAccumulator(n=3, discount=0.99)
    acc.start(first_observation)
    out = acc.step(action, reward, env_discount, observation, last=last)
    # ... at `last`, `out` holds every remaining transition of the episode.

  Observations are opaque: an actor that stores PNG bytes can pass the bytes,
  so each frame stack is encoded once, not twice (as S_t and as S_{t+n}).
  """

  def __init__(self, n: int, discount: float):
    if int(n) != n or n < 1:
      raise ValueError(f'n must be an integer >= 1, got {n}.')
    if not 0.0 <= discount <= 1.0:
      raise ValueError(f'discount must be in [0, 1], got {discount}.')
    self._n = int(n)
    self._gamma = float(discount)
    self._pending: Deque[_Pending] = collections.deque()
    self._observation = None
    self._extras = None
    self._in_episode = False
    self._step = 0  # Lifetime step counter: provenance of the next S_t.

  @property
  def n(self) -> int:
    return self._n

  @property
  def num_pending(self) -> int:
    """Steps taken whose transitions have not been emitted yet."""
    return len(self._pending)

  @property
  def steps(self) -> int:
    """Environment steps seen over the accumulator's lifetime."""
    return self._step

  def start(self, observation: Any, extras: Any = None) -> None:
    """Begins an episode at `observation` (S_0).

    Raises:
      ValueError: if the previous episode still has pending steps; call
        `flush()` (emit them, truncated) or `reset()` (drop them) first.
    """
    if self._pending:
      raise ValueError(
          f'start() with {len(self._pending)} pending steps of the previous '
          'episode: call flush() to emit them or reset() to drop them.')
    self._observation = observation
    self._extras = extras
    self._in_episode = True

  def step(self,
           action: Any,
           reward: float,
           discount: float,
           next_observation: Any,
           next_extras: Any = None,
           last: bool = False) -> List[NStepTransition]:
    """Adds (A_t, r_{t+1}, d_{t+1}, S_{t+1}); returns completed transitions.

    Args:
      action: A_t taken in the current state.
      reward: r_{t+1}.
      discount: the environment's d_{t+1} (0 on termination, else 1); the
        accumulator multiplies it by gamma.
      next_observation: S_{t+1}.
      next_extras: what to attach to S_{t+1} (e.g. its Q-values).
      last: whether S_{t+1} ends the episode (termination or truncation).

    Returns:
      Transitions in order of their start step: none or one while the
      episode runs, all pending ones when `last`.
    """
    if not self._in_episode:
      raise ValueError('step() before start(): begin each episode with '
                       'start(first_observation).')
    self._pending.append(
        _Pending(observation=self._observation, action=action,
                 extras=self._extras, step=self._step))
    self._step += 1
    step_discount = self._gamma * float(discount)
    for entry in self._pending:
      entry.reward += entry.discount * float(reward)
      entry.discount *= step_discount
      entry.num_steps += 1
    self._observation = next_observation
    self._extras = next_extras

    if last:
      self._in_episode = False
      return self._emit_all()
    if self._pending[0].num_steps == self._n:
      return [self._emit(self._pending.popleft())]
    return []

  def flush(self) -> List[NStepTransition]:
    """Emits pending steps, bootstrapping from the latest state; ends episode.

    For an episode cut short without a `last` step (e.g. an actor that is
    being stopped): the transitions are those of a time-limit truncation.
    """
    self._in_episode = False
    return self._emit_all()

  def reset(self) -> None:
    """Drops pending steps and the current episode (nothing is emitted)."""
    self._pending.clear()
    self._in_episode = False
    self._observation = None
    self._extras = None

  def _emit_all(self) -> List[NStepTransition]:
    out = [self._emit(entry) for entry in self._pending]
    self._pending.clear()
    return out

  def _emit(self, entry: _Pending) -> NStepTransition:
    return NStepTransition(
        observation=entry.observation,
        action=entry.action,
        reward=entry.reward,
        discount=entry.discount,
        next_observation=self._observation,
        num_steps=entry.num_steps,
        step=entry.step,
        extras=entry.extras,
        next_extras=self._extras)


# ---------------------------------------------------------------------------
# Targets, TD errors, loss (Sec. 3.1).
# ---------------------------------------------------------------------------


def double_q_target(reward: TensorLike,
                    discount: TensorLike,
                    q_next_selector: TensorLike,
                    q_next_evaluator: TensorLike) -> tf.Tensor:
  """n-step double-Q target G = R + gamma_acc q_eval(S', argmax_a q_sel(S', a)).

  Args:
    reward: [B] partial returns R_{t:t+n}.
    discount: [B] accumulated discounts gamma_{t:t+n} (0 if terminal).
    q_next_selector: [B, A] Q-values of S_{t+n} that pick the action (the
      online network, Sec. 3.1).
    q_next_evaluator: [B, A] Q-values of S_{t+n} that value it (the target
      network on the learner; the same network on an actor).

  Returns:
    [B] float32 targets, with gradients stopped (regression targets).
  """
  q_next_selector = tf.convert_to_tensor(q_next_selector, tf.float32)
  q_next_evaluator = tf.convert_to_tensor(q_next_evaluator, tf.float32)
  reward = tf.convert_to_tensor(reward, tf.float32)
  discount = tf.convert_to_tensor(discount, tf.float32)
  best_action = tf.argmax(q_next_selector, axis=-1, output_type=tf.int32)
  q_next = tf.gather(q_next_evaluator, best_action, axis=-1, batch_dims=1)
  return tf.stop_gradient(reward + discount * q_next)


def q_of_actions(q_values: TensorLike, action: TensorLike) -> tf.Tensor:
  """q(S_t, A_t): picks [B] entries of [B, A] Q-values by action index."""
  q_values = tf.convert_to_tensor(q_values)
  action = tf.cast(tf.convert_to_tensor(action), tf.int32)
  return tf.gather(q_values, action, axis=-1, batch_dims=1)


def double_q_td_error(q_values: TensorLike,
                      action: TensorLike,
                      reward: TensorLike,
                      discount: TensorLike,
                      q_next_selector: TensorLike,
                      q_next_evaluator: TensorLike) -> tf.Tensor:
  """delta = G - q(S_t, A_t), [B] float32; differentiable through q_values."""
  target = double_q_target(reward, discount, q_next_selector,
                           q_next_evaluator)
  q = q_of_actions(tf.convert_to_tensor(q_values, tf.float32), action)
  return target - q


def priorities_from_td_errors(td_error: TensorLike) -> tf.Tensor:
  """Proportional priorities p = |delta| (App. F), as float64 for Reverb.

  No epsilon is added: the paper sets p_k = |delta_k|. A transition whose TD
  error is exactly 0 is then (almost) never sampled until its priority
  changes; Reverb may still return it, with P = 0, which
  `importance_weights` handles.
  """
  return tf.cast(tf.abs(tf.stop_gradient(td_error)), tf.float64)


def importance_weights(probabilities: TensorLike,
                       replay_size: TensorLike,
                       beta: float) -> tf.Tensor:
  """w_i = (N P(i))^-beta / max_j w_j over the batch (Schaul et al. 2016).

  Normalising by the batch maximum (not the replay-wide one, which would need
  the minimum probability in the table) keeps w <= 1 so the weights only
  scale updates down; it is what Acme and most TF/JAX agents do, since Reverb
  reports each item's probability and the table size at sampling time.

  Args:
    probabilities: [B] sampling probabilities P(i) (Reverb SampleInfo).
    replay_size: N, scalar or [B] (Reverb reports it per sample).
    beta: importance-sampling exponent (0.4 in Ape-X, Sec. 4.1).

  Returns:
    [B] float32 weights in [0, 1], maximum exactly 1; in (0, 1] unless a
    weight is below float32's range (next to an item with P = 0, say).
  """
  probabilities = tf.cast(tf.convert_to_tensor(probabilities), tf.float64)
  replay_size = tf.cast(tf.convert_to_tensor(replay_size), tf.float64)
  # Reverb can return an item with P = 0 (priority 0, i.e. a TD error of
  # exactly 0, picked through the sum tree's rounding residue), and
  # log(0) = -inf would make the weights inf - inf = NaN. Flooring N P at the
  # smallest positive float64 gives such an item the batch's largest weight,
  # the limit of (N P)^-beta as P -> 0, and keeps every weight finite.
  scaled = tf.maximum(replay_size * probabilities,
                      np.finfo(np.float64).tiny)
  # In log space: (N P)^-beta can under/overflow for tiny P and large N.
  log_w = -beta * tf.math.log(scaled)
  return tf.cast(tf.exp(log_w - tf.reduce_max(log_w)), tf.float32)


class LossOutput(NamedTuple):
  """What the learner needs from one batch."""
  loss: tf.Tensor  # Scalar: mean_i w_i 1/2 delta_i^2.
  td_error: tf.Tensor  # [B] delta_i = G_i - q(S_i, A_i).
  priorities: tf.Tensor  # [B] float64 |delta_i|, for Reverb.


def double_q_loss(q_values: TensorLike,
                  action: TensorLike,
                  reward: TensorLike,
                  discount: TensorLike,
                  q_next_online: TensorLike,
                  q_next_target: TensorLike,
                  weights: Optional[TensorLike] = None) -> LossOutput:
  """Importance-weighted n-step double-Q loss, 1/2 delta^2 (Sec. 3.1).

  The per-transition loss is the paper's squared error (no Huber loss, unlike
  Nature DQN's error clipping); the batch loss is the weighted mean. The
  paper does not say mean or sum: the mean (as in Acme/trfl) keeps the
  gradient norm independent of the batch size, which matters because the
  norm is clipped at 40 (App. C).

  Args:
    q_values: [B, A] online Q-values of S_t (differentiated).
    action: [B] A_t.
    reward: [B] R_{t:t+n}.
    discount: [B] gamma_{t:t+n}.
    q_next_online: [B, A] online Q-values of S_{t+n} (action selection).
    q_next_target: [B, A] target-network Q-values of S_{t+n} (evaluation).
    weights: [B] importance weights, or None for uniform.

  Returns:
    LossOutput(loss, td_error, priorities).
  """
  td_error = double_q_td_error(q_values, action, reward, discount,
                               q_next_online, q_next_target)
  per_item = 0.5 * tf.square(td_error)
  if weights is not None:
    per_item = tf.convert_to_tensor(weights, tf.float32) * per_item
  return LossOutput(
      loss=tf.reduce_mean(per_item),
      td_error=td_error,
      priorities=priorities_from_td_errors(td_error))
