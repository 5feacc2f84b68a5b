"""Running a plan: the task DAG, the executor that walks it, locks, results, progress."""
