"""What apply adds to a plan's IngestSpec, and only that: the target's Spark catalog and
registry connection, and the secrets of the table's config.

A plan never holds a secret (plan files, `plan --json`): a hash mask's salt is left out
(`MaskStep.salted` says there is one) and the registry's credentials are the target's.
Everything else apply runs comes from the plan's ingest action as it is.
"""

from __future__ import annotations

import dataclasses

from tableflow_core.config.models.transforms import MaskTransform
from tableflow_core.config.project import Project, Table
from tableflow_core.errors import BindError
from tableflow_core.ingest.compiled import CompiledTable
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.targets.registry import registry_settings
from tableflow_core.transforms.compile import MaskStep, TransformStep
from tableflow_core.transforms.locations import step_index


def bind_spec(spec: IngestSpec, project: Project, spark_catalog: str) -> IngestSpec:
    """`spec` ready to run on the target: its Spark catalog, the registry, the salts."""
    compiled = spec.compiled
    if compiled is not None:
        compiled = with_secrets(compiled, project.table(spec.table_name))
    return spec.bind(
        catalog=spark_catalog,
        registry=registry_settings(project.target.schema_registry),
        compiled=compiled,
    )


def with_secrets(compiled: CompiledTable, table: Table) -> CompiledTable:
    """The compiled chain with each salted mask's salt, from the table's config."""
    steps = tuple(_with_salt(step, table) for step in compiled.transforms.steps)
    if all(new is old for new, old in zip(steps, compiled.transforms.steps, strict=True)):
        return compiled
    transforms = dataclasses.replace(compiled.transforms, steps=steps)
    return dataclasses.replace(compiled, transforms=transforms)


def _with_salt(step: TransformStep, table: Table) -> TransformStep:
    if not isinstance(step, MaskStep) or not step.salted or step.salt is not None:
        return step
    index = step_index(step.key)
    config = (
        table.transforms[index] if index is not None and index < len(table.transforms) else None
    )
    if not isinstance(config, MaskTransform) or config.salt is None:
        raise BindError(
            f"table {table.name}: the plan's {step.key} is a salted mask, and the project "
            "gives it no salt; plan again"
        )
    return dataclasses.replace(step, salt=config.salt)
