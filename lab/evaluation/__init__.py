"""Evaluating one trained run: accuracy length by length, order-sensitivity probes, the learned
rule, attention maps."""
