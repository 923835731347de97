"""What every program shares: typed run configs, atomic files, checkpoints, data streams, devices
and seeds, signals, machine facts, statistics."""
