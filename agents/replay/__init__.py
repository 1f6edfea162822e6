"""Replay utilities shared by the agents.

Kept import-free; import submodules explicitly, e.g.
`from agents.replay import png`.

  png   lossless PNG codec for stacked uint8 frames (Ape-X App. F), numpy
        (actor side) and TF (inside the learner's tf.data pipeline).
"""
