"""The project model: what users write in `tableflow_project.yml` and `tables/*.yml`.

Every model forbids unknown keys (a typo is an error, with a suggestion) and is
frozen: a loaded project is an immutable value that planning reads but never edits.
Field descriptions double as the generated reference in docs/reference.md.

One module per part of the YAML: `files` (the two kinds of file users write), `targets`,
`catalogs`, `tables`, `formats`, `layout`, `transforms`, `checks`, `dead_letter` and
`maintenance`; `base` holds what they share.
"""
