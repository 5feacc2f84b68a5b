"""Name rules shared by `validate` and the components that enforce them at apply time.

One rule each, so a name `validate` accepts is one the catalog and Kafka accept too:
- catalog names (namespace levels, table names): the embedded catalog's rule
  (`catalog/service.py` uses `catalog_name_problem`);
- Kafka topics: Kafka's own rule (1-249 of `[A-Za-z0-9._-]`, not `.` or `..`).

Every check matches the whole string: `re.match(r"...$")` also accepts a trailing newline.
"""

from __future__ import annotations

import re
import unicodedata

MAX_NAME_LENGTH = 255
MAX_NAMESPACE_LEVELS = 16
MAX_TOPIC_LENGTH = 249
_TOPIC = re.compile(r"[A-Za-z0-9._-]+")
# IAM policy wildcards (`*`, `?`) and its variable marker (`${...}`): a name or location
# holding one would widen the session policy of the table's vended credentials.
POLICY_WILDCARDS = frozenset("*?$")
# Unicode categories that print as nothing or as a line break: controls (C0, DEL, C1,
# NEL), format characters (zero-width, bidi overrides), line and paragraph separators
# (U+2028, U+2029) and lone surrogates.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def invisible_character(text: str) -> str | None:
    """The first character of `text` that is a control, format or line/paragraph
    separator, as `U+XXXX`; None if there is none."""
    for character in text:
        if unicodedata.category(character) in _INVISIBLE_CATEGORIES:
            return f"U+{ord(character):04X}"
    return None


def catalog_name_problem(name: object) -> str | None:
    """Why `name` cannot be a namespace level or table name, or None."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if len(name) > MAX_NAME_LENGTH:
        return f"is longer than {MAX_NAME_LENGTH} characters"
    if "." in name:
        # SqlCatalog stores namespaces as dotted strings: a dot inside a level is ambiguous.
        return "cannot contain '.'"
    if any(c in name for c in "/\\"):
        return "cannot contain '/' or '\\'"
    if invisible := invisible_character(name):
        return f"cannot contain control, format or line separator characters ({invisible})"
    if any(c in POLICY_WILDCARDS for c in name):
        return "cannot contain '*', '?' or '$' (wildcards of the storage access policies)"
    return None


def namespace_problem(dotted: str) -> str | None:
    """Why a dot-separated namespace (`sales.eu`) is not valid, or None."""
    levels = dotted.split(".")
    if len(levels) > MAX_NAMESPACE_LEVELS:
        return f"has more than {MAX_NAMESPACE_LEVELS} levels"
    for level in levels:
        if problem := catalog_name_problem(level):
            return f"level {shown(level)} {problem}" if level else "has an empty level"
    return None


def topic_problem(topic: str) -> str | None:
    """Why `topic` is not a valid Kafka topic name, or None."""
    if len(topic) > MAX_TOPIC_LENGTH or not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        return (
            f"use 1-{MAX_TOPIC_LENGTH} letters, digits, '.', '_' or '-' (Kafka's rule for "
            "topic names)"
        )
    return None


def shown(value: str, limit: int = 60) -> str:
    """`repr(value)`, cut in the middle when long (a 70,000-character name stays readable)."""
    if len(value) <= limit:
        return repr(value)
    return repr(value[: limit // 2]) + f"...({len(value):,} characters)..." + repr(value[-10:])
