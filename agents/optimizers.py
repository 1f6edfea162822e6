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
