"""One module per stage kind; each registers its runner with `registry.stage_runner`."""
