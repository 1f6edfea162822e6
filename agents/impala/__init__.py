"""IMPALA (Espeholt et al., 2018): V-trace and the learner's building blocks.

Kept import-free on purpose: importing `agents.impala` must not pull in
TensorFlow, so lightweight tools (configs, launch scripts) can import the
package. Import submodules explicitly, e.g. `from agents.impala import vtrace`:

  config    ImpalaConfig (every paper value cited; paper / paper_distributed /
            local profiles); imports only numpy
  vtrace    V-trace and the Table 2 corrections
  queue     Reverb queue and replay tables, the Trajectory signature, the
            actors' UnrollWriter, the learner's make_dataset
  actor     ImpalaActor (one or several environments), make_environment
  learning  ImpalaLearner, impala_loss
The networks (Figure 3) are in networks/impala.py.
"""
