"""Experiment plumbing behind ``train.py``, ``eval.py``, ``sweep.py``, ``bench.py`` and
``properties.py``, one subpackage per concern: ``common``, ``training``, ``evaluation``,
``reporting``, ``sweeps``, ``bench``, ``properties``."""
