"""Transforms on the run's data: the compiled chain on Spark (`spark.py`) and the dedup the
read tasks run on Arrow (`arrow_dedup.py`, `read_task_dedup.py`)."""
