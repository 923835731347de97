"""TensorBoard event files of runs: where they go (place), reading and writing them (files),
and the tag names shared by their writers (tags)."""
