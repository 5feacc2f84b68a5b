"""Turn pydantic validation errors into located, helpful config problems."""

from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from tableflow_core.config.errors import ConfigProblem
from tableflow_core.config.names import shown
from tableflow_core.config.yaml_source import FieldPath, YamlDocument, dotted_path

M = TypeVar("M", bound=BaseModel)
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")
# Beyond this a value is not a typo of a short keyword (and difflib is quadratic).
_MAX_SUGGESTED_LENGTH = 100


def validate_document(
    model: type[M], document: YamlDocument, base_path: FieldPath = ()
) -> tuple[M | None, list[ConfigProblem]]:
    """Validate `document.data` at `base_path` against `model`; never raises."""
    data = _get_at(document.data, base_path)
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, [_problem(model, document, base_path, error) for error in exc.errors()]


def _problem(
    model: type[BaseModel], document: YamlDocument, base_path: FieldPath, error: Any
) -> ConfigProblem:
    data = _get_at(document.data, base_path)
    path = _data_path(data, tuple(error["loc"]))
    full_path = (*base_path, *path)
    message = _message(model, data, path, error)
    return ConfigProblem(
        message=message,
        file=document.file,
        line=document.line_of(full_path),
        field_path=dotted_path(full_path) or None,
    )


def _message(model: type[BaseModel], data: Any, path: FieldPath, error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden" and path:
        key = str(path[-1])
        allowed = allowed_keys(model, data, path[:-1])
        close = did_you_mean(key, allowed)
        hint = f"; did you mean {close!r}?" if close else ""
        valid = f" Valid keys: {', '.join(sorted(allowed))}." if allowed and not close else ""
        return f"unknown key {shown(key)}{hint}{valid}"
    if kind in ("literal_error", "enum"):
        # pydantic lists the allowed values as reprs: "'append' or 'upsert'"
        expected = _QUOTED.findall(str(error.get("ctx", {}).get("expected", "")))
        close = did_you_mean(error.get("input"), expected)
        hint = f"; did you mean {close!r}?" if close else ""
        return str(error["msg"]) + hint
    if kind == "missing":
        return f"missing required key {str(path[-1])!r}" if path else "missing value"
    if kind == "union_tag_invalid":
        ctx = error.get("ctx", {})
        return f"unknown type {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
    if kind == "union_tag_not_found":
        return f"missing key 'type' (one of {error.get('ctx', {}).get('discriminator', '')})"
    # pydantic messages never include the input value here, so secrets stay out of them.
    return str(error["msg"]).removeprefix("Value error, ")


def did_you_mean(given: object, candidates: list[str]) -> str | None:
    """The candidate `given` was most likely meant to be (`json-schema` -> `json_schema`,
    `DLQ` -> `dlq`, `apend` -> `append`), else None. Only the candidate is shown, never
    the given value (it may be a secret in the wrong place)."""
    if not isinstance(given, str) or not candidates or len(given) > _MAX_SUGGESTED_LENGTH:
        return None
    normalized = {_normalized(c): c for c in candidates}
    if (same := normalized.get(_normalized(given))) is not None:
        return same
    close = difflib.get_close_matches(given.lower(), candidates, n=1, cutoff=0.6)
    return close[0] if close else None


def _normalized(text: str) -> str:
    return text.strip().lower().replace("-", "_").replace(" ", "_")


def _get_at(data: Any, path: FieldPath) -> Any:
    for part in path:
        data = data[part]
    return data


def _data_path(data: Any, loc: tuple[Any, ...]) -> FieldPath:
    """Map a pydantic `loc` onto the YAML data, dropping union tags and validator names."""
    path: list[str | int] = []
    current = data
    for part in loc:
        if (isinstance(current, dict) and part in current) or (
            isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current)
        ):
            path.append(part)
            current = current[part]
        elif isinstance(current, dict) and isinstance(part, str) and part == loc[-1]:
            path.append(part)  # the offending key itself (missing or extra)
    return tuple(path)


def allowed_keys(model: type[BaseModel], data: Any, path: FieldPath) -> list[str]:
    """The keys valid at `path` inside data validated by `model` (best effort)."""
    current_type: Any = model
    current_data = data
    for part in path:
        current_type = _pick_model(current_type, current_data)
        if isinstance(part, int):
            current_type = _item_type(current_type)
        elif isinstance(current_type, type) and issubclass(current_type, BaseModel):
            field = current_type.model_fields.get(part)
            if field is None:
                return []
            current_type = field.annotation
        else:
            current_type = _item_type(current_type)  # dict value
        current_data = current_data[part] if current_data is not None else None
    final = _pick_model(current_type, current_data)
    if isinstance(final, type) and issubclass(final, BaseModel):
        return list(final.model_fields)
    return []


def _members(annotation: Any) -> list[Any]:
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return _members(get_args(annotation)[0])
    if origin is Union or isinstance(annotation, types.UnionType):
        members: list[Any] = []
        for arg in get_args(annotation):
            members.extend(_members(arg))
        return members
    return [annotation]


def _pick_model(annotation: Any, data: Any) -> Any:
    """For Optional/union annotations, the member matching the data's `type` key."""
    members = [m for m in _members(annotation) if m is not type(None)]
    models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
    if len(members) == 1:
        return members[0]
    if isinstance(data, dict) and models:
        for candidate in models:
            type_field = candidate.model_fields.get("type")
            if type_field is not None and data.get("type") in get_args(type_field.annotation):
                return candidate
        return models[0]
    if isinstance(data, list):
        for member in members:
            if get_origin(member) is list:
                return member
    return members[0] if members else annotation


def _item_type(annotation: Any) -> Any:
    args = get_args(annotation)
    return args[-1] if args else None
