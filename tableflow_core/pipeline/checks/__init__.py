"""Checks on the run's data: one Spark aggregate per batch (`run.py`) and the `unique`
proof from the read tasks (`read_task_unique.py`)."""
