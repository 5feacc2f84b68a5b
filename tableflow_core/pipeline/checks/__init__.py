"""Checks on the run's data: great-expectations on Spark (`run.py`, `gx_flags.py`, started
early by `warmup.py`) and the `unique` proof from the read tasks (`read_task_unique.py`)."""
