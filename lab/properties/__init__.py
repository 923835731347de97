"""Scheme properties measured on a scheme's own hooks: the property report, its figures and
demonstrations."""
