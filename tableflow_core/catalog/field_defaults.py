"""Checks of `initial-default` / `write-default` in a schema's JSON, before pyiceberg parses it.

The spec's JSON single-value serialization fixes each default's JSON type (a boolean, a
number, a string for dates, decimals, UUIDs, hex for binary). Iceberg's Java parser
refuses anything else and refuses non-null defaults on nested types (struct, list, map)
and on `unknown`/`variant`/`geometry`/`geography`. pyiceberg 0.12 raises a TypeError on
a nested default (a 500 before this check) and stores an `int` default of `"abc"`
unchanged (metadata no Java client can read).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

_INT_RANGES = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_STRING_TYPES = (
    "date", "time", "timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns",
    "string", "uuid", "binary",
)  # fmt: skip
_NULL_ONLY_PREFIXES = ("unknown", "variant", "geometry", "geography")
DEFAULT_KEYS = ("initial-default", "write-default")
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def schema_default_problems(schema: Any) -> list[str]:
    """One sentence per field default that does not fit its type; [] when all do.

    Anything that is not a schema object is left to the model's own validation.
    """
    problems: list[str] = []
    stack: list[tuple[Any, str]] = [(schema, "")]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, dict):
            continue
        kind = node.get("type")
        if kind == "struct" and isinstance(node.get("fields"), list):
            for field in node["fields"]:
                if not isinstance(field, dict):
                    continue
                name = f"{path}{field.get('name')}"
                problems.extend(_field_problems(field, name))
                stack.append((field.get("type"), name + "."))
        elif kind == "list":
            stack.append((node.get("element"), f"{path}element."))
        elif kind == "map":
            stack.append((node.get("key"), f"{path}key."))
            stack.append((node.get("value"), f"{path}value."))
    return problems


def _field_problems(field: dict[str, Any], name: str) -> list[str]:
    problems = []
    for key in DEFAULT_KEYS:
        value = field.get(key)
        if value is not None and (problem := value_problem(field.get("type"), value)):
            problems.append(f"field {name!r} {key}: {problem}")
    return problems


def value_problem(field_type: Any, value: Any) -> str | None:
    """Why `value` (not None) cannot be a default of `field_type` (its JSON), else None."""
    if isinstance(field_type, dict):
        return f"a {field_type.get('type')} field can only default to null"
    if not isinstance(field_type, str):
        return None  # an invalid type: the schema's own validation says so
    if field_type.startswith(_NULL_ONLY_PREFIXES):
        return f"a {field_type} field can only default to null"
    if field_type == "boolean":
        return None if isinstance(value, bool) else "must be a JSON boolean"
    if field_type in _INT_RANGES:
        low, high = _INT_RANGES[field_type]
        if not isinstance(value, int) or isinstance(value, bool):
            return "must be a JSON integer"
        return None if low <= value <= high else f"is out of range for {field_type}"
    if field_type in ("float", "double"):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok else "must be a JSON number"
    if field_type in _STRING_TYPES or field_type.startswith(("decimal", "fixed")):
        if not isinstance(value, str):
            return "must be a JSON string"
        if field_type == "binary" or field_type.startswith("fixed"):
            return None if _is_hex(value) else "must be a string of hexadecimal digits"
        if field_type.startswith("decimal"):
            return _decimal_problem(field_type, value)
        return None
    return None


def _decimal_problem(field_type: str, text: str) -> str | None:
    """Java's rule: the value's scale is the type's, its digits fit the precision. Checked
    on the parsed digits, never by scaling: pyiceberg spent minutes on `"1e999999999"`."""
    match = _DECIMAL.fullmatch(field_type)
    if match is None:
        return None  # an invalid type: the schema's own validation says so
    precision, scale = int(match[1]), int(match[2])
    try:
        number = Decimal(text)
    except ArithmeticError:
        return "must be a decimal number in a string"
    sign_digits_exponent = number.as_tuple()
    exponent = sign_digits_exponent.exponent
    if not isinstance(exponent, int):  # NaN, Infinity
        return "must be a finite decimal number"
    if -exponent != scale or len(sign_digits_exponent.digits) > precision:
        return f"does not fit {field_type} (write it with exactly {scale} decimal places)"
    return None


def _is_hex(text: str) -> bool:
    return len(text) % 2 == 0 and all(c in "0123456789abcdefABCDEF" for c in text)
