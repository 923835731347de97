"""Language-modelling track: evaluations and reports of the text and passkey tasks."""
