"""Experiment plumbing shared by ``train.py``, ``eval.py``, ``sweep.py`` and ``bench.py``:
configs, devices and seeds, checkpoints, the training loop, evaluation and reports."""
