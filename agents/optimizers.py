"""RMSProp as the papers' TensorFlow 1 code ran it, on Sonnet 2.

Both learners are TF1-era (Ape-X App. F; IMPALA's released code uses
`tf.train.RMSPropOptimizer`). Sonnet's `snt.optimizers.RMSProp` computes

    ms  <- decay ms + (1 - decay) g^2
    mg  <- decay mg + (1 - decay) g                      (centered only)
    mom <- momentum mom + lr g / sqrt(ms - mg^2 + eps)   (mg = 0 uncentered)
    theta <- theta - mom

with eps INSIDE the square root, exactly where TF1's ApplyRMSProp and
ApplyCenteredRMSProp put it (and unlike Keras/PyTorch's g / (sqrt(v) + eps)).
One difference remains: TF1 starts the mean-square slot `ms` at ONES, Sonnet
at zeros. With zeros the first updates are ~lr / sqrt(1 - decay) per
coordinate (sign-like); with ones they start at ~lr |g|. Neither paper says
which; their implementations predate TF2, so the slot starts at 1 by default.
"""

from typing import Sequence, Union

import sonnet as snt
import tensorflow as tf

# The RMSProp variants a learner may be given: the papers' (TF1) and, as a
# diagnostic only, the one most re-implementations use (see pytorch_rmsprop).
RMSPROPS = ('tf1', 'pytorch')


def tf1_rmsprop(params: Sequence[tf.Variable],
                learning_rate: Union[float, tf.Variable], *, decay: float,
                momentum: float, epsilon: float, centered: bool,
                initial_mean_square: float = 1.0) -> snt.optimizers.RMSProp:
  """A Sonnet RMSProp for `params`, its slots created and set as TF1's.

  The slots are created eagerly, by a zero update that leaves parameters and
  slots at their initial values, so that the compiled step never creates
  variables; then the mean-square slot is set to `initial_mean_square`
  (1: TF1's RMSPropOptimizer; 0: Sonnet's).
  """
  optimizer = snt.optimizers.RMSProp(
      learning_rate=learning_rate, decay=decay, momentum=momentum,
      epsilon=epsilon, centered=centered)
  optimizer.apply([tf.zeros_like(v) for v in params], params)
  if initial_mean_square:
    for ms in optimizer.ms:
      ms.assign(tf.fill(ms.shape, tf.cast(initial_mean_square, ms.dtype)))
  return optimizer


class PyTorchRMSProp(snt.Module):
  """RMSProp with eps OUTSIDE the root and the mean square started at 0.

      ms    <- decay ms + (1 - decay) g^2
      mom   <- momentum mom + lr g / (sqrt(ms) + eps)
      theta <- theta - mom

  torch.optim.RMSprop's (and Keras', optax's) rule, which the IMPALA
  re-implementations whose Atari learning speed is published use
  (TorchBeast, Cleanba). Neither paper ran it: it exists to tell a slow
  optimizer from a broken agent. With eps = 0.01 a coordinate whose
  gradients have RMS 0.001 moves about 9x further per step than under TF1's
  lr g / sqrt(ms + eps), whose denominator never drops below sqrt(eps).
  """

  def __init__(self, learning_rate: Union[float, tf.Variable], *,
               decay: float, momentum: float, epsilon: float,
               name: str = 'pytorch_rmsprop'):
    super().__init__(name=name)
    self.learning_rate = learning_rate
    self.decay = decay
    self.momentum = momentum
    self.epsilon = epsilon
    self.ms = []
    self.mom = []

  def create(self, params: Sequence[tf.Variable]) -> None:
    with tf.name_scope(self.name):
      self.ms = [tf.Variable(tf.zeros_like(p), trainable=False, name='ms')
                 for p in params]
      self.mom = [tf.Variable(tf.zeros_like(p), trainable=False, name='mom')
                  for p in params]

  def apply(self, updates: Sequence[tf.Tensor],
            parameters: Sequence[tf.Variable]) -> None:
    lr = tf.cast(self.learning_rate, tf.float32)
    for g, p, ms, mom in zip(updates, parameters, self.ms, self.mom):
      ms.assign(self.decay * ms + (1.0 - self.decay) * tf.square(g))
      mom.assign(self.momentum * mom +
                 lr * g / (tf.sqrt(ms) + self.epsilon))
      p.assign_sub(mom)


def rmsprop(style: str, params: Sequence[tf.Variable],
            learning_rate: Union[float, tf.Variable], *, decay: float,
            momentum: float, epsilon: float, centered: bool = False,
            initial_mean_square: float = 1.0) -> snt.Module:
  """The RMSProp named by `style` (one of RMSPROPS), slots created."""
  if style == 'tf1':
    return tf1_rmsprop(params, learning_rate, decay=decay, momentum=momentum,
                       epsilon=epsilon, centered=centered,
                       initial_mean_square=initial_mean_square)
  if style == 'pytorch':
    if centered:
      raise ValueError('the pytorch RMSProp here is uncentered only.')
    optimizer = PyTorchRMSProp(learning_rate, decay=decay, momentum=momentum,
                               epsilon=epsilon)
    optimizer.create(params)
    return optimizer
  raise ValueError(f'Unknown RMSProp style {style!r}; valid choices: '
                   f'{", ".join(RMSPROPS)}.')
