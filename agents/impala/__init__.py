"""IMPALA (Espeholt et al., 2018): V-trace and the learner's building blocks.

Kept import-free on purpose: importing `agents.impala` must not pull in
TensorFlow, so lightweight tools (configs, launch scripts) can import the
package. Import submodules explicitly, e.g. `from agents.impala import vtrace`.
"""
