"""TensorBoard tag names shared by the training logs (:mod:`lab.training.run_logs`), ``eval.py``'s
per-run curves (:func:`lab.evaluation.tensorboard.write_tensorboard`) and a sweep's summary runs
(:mod:`lab.reporting.sweep_tensorboard`); a module of its own so none of them imports another for a
name.

Curves whose step is a length, not a training step: TensorBoard smooths every scalar chart with
an exponential moving average (default weight 0.6), which for such a curve blends neighbouring
lengths (a curve at 0 from length 20 on reads 0.12 at 20). Their tags carry
:data:`LENGTH_CURVES` to say the smoothing must be 0, the link ``sweep.py`` prints opens
TensorBoard with ``smoothing=0``, and the same curves are drawn as figures in the Images tab,
which no slider changes.
"""

LENGTH_CURVES = "by_length_set_smoothing_0"
"""Tag group of the per-run extrapolation curves (step = length): ``LENGTH_CURVES/exact_match``
and ``LENGTH_CURVES/token_accuracy``."""

LENGTH_COMPARE = f"exact_match_{LENGTH_CURVES}"
"""Leaf of ``compare/TASK/...`` (and ``mean/TASK/...``): exact-match, step = length."""

LENGTH_CHART = "extrapolation: exact-match, x = length (eval.py; set Smoothing to 0)"
"""Title of the Custom Scalars chart of :data:`LENGTH_COMPARE`."""

RUN_FIGURE = "figures/accuracy_vs_length"
"""Image tag of a run's accuracy-against-length figure (Images tab)."""
