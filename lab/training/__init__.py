"""Training one run: the loop, its TensorBoard logs, resume, the learning-rate schedule,
data-parallel ranks."""
