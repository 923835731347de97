"""TensorBoard event files of runs: where they go (place), reading and rewriting them (files),
opening a run's writer so its file is read last (writer), and the tag names shared by their
writers (tags)."""
