"""Keeping secrets out of everything tableflow prints, writes or logs.

Secrets live in three shapes in a project:
- `SecretStr` fields (masked by the models themselves);
- values of free-form settings whose *key* says they are secret (`kafka.config`'s
  `sasl.password`, a catalog's `token` or `s3.secret-access-key` property, Spark's
  `spark.hadoop.fs.s3a.secret.key`);
- the password inside a URL (`https://user:pass@registry`, `postgresql://u:p@db/x`,
  `jdbc:postgresql://db/x?user=u&password=p`).

This module recognizes the last two (`is_secret_key`, `url_secrets`), masks them in data
(`redact_mapping`, `redact_url`) and in free text (`redact_text`, which also masks the
known secret values it is given). `Project.redact` (every error message, the docs site's
notes, run results), `compile`, the docs site's properties and the catalog server's
access log all go through it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

MASK = "**********"

# Keys of settings whose values are secret, matched anywhere in the key (any case).
_SECRET_KEY = re.compile(
    r"pass(?:word|wd)|secret|credential|token(?![a-z])|(?:^|[._-])pwd(?:[._-]|$)"
    r"|(?:access|account|api|private|sas|signing)[._-]?key"
    r"|jaas|user[._-]?info|sessionkey",
    re.IGNORECASE,
)
# Settings whose key reads as secret but which declare a mode by one of a few words
# (`storage.credentials: vended`, validated by the config model): the word is shown as
# it is; any other value under such a key stays masked. Keyed by the exact key name.
DECLARED_WORDS: dict[str, frozenset[str]] = {
    "credentials": frozenset({"static", "vended", "default-chain"}),
}
# (The password runs to the authority's last `@`: passwords may hold `@`.)
_URL_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*):(?P<pw>[^\s/]+)@")
# `password=...` style parameters in query strings, JDBC URLs, JAAS configs (quoted) and
# log lines.
_SECRET_PARAM = re.compile(
    r"(?P<name>(?<![A-Za-z0-9._-])[A-Za-z0-9._-]*"
    r"(?:password|passwd|pwd|secret|token|credential)[A-Za-z0-9._-]*=)"
    r"(?:\"(?P<quoted>[^\"]*)\"|(?P<value>[^&;\s\"',]*))",
    re.IGNORECASE,
)


def is_secret_key(key: str) -> bool:
    """True for setting names that hold secrets (`sasl.password`, `s3.secret-access-key`)."""
    return bool(_SECRET_KEY.search(key))


def url_secrets(text: str) -> list[str]:
    """The passwords a URL carries: its userinfo password and secret query parameters."""
    found = [m.group("pw") for m in _URL_USERINFO.finditer(text)]
    for match in _SECRET_PARAM.finditer(text):
        found.append(match.group("quoted") or match.group("value") or "")
    found = [secret for secret in found if secret]
    try:
        password = urlsplit(text).password
    except ValueError:
        password = None
    if password:
        found.append(password)
    return found


def redact_url(url: str) -> str:
    """`url` with the password of its userinfo and secret parameters masked."""
    return _SECRET_PARAM.sub(_masked_param, _URL_USERINFO.sub(rf"\g<head>:{MASK}@", url))


def _masked_param(match: re.Match[str]) -> str:
    if match.group("quoted") is not None:
        return f'{match.group("name")}"{MASK}"'
    return match.group("name") + MASK


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every known secret value, URL password and secret parameter masked."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return redact_url(text)


def redact_mapping(data: Any) -> Any:
    """A copy of JSON-like `data` with secret-keyed values and URL passwords masked."""
    if isinstance(data, Mapping):
        return {
            key: (MASK if _is_secret_item(key, value) else redact_mapping(value))
            for key, value in data.items()
        }
    if isinstance(data, list | tuple):
        return [redact_mapping(item) for item in data]
    if isinstance(data, str):
        return redact_url(data)
    return data


def redact_setting(key: str, value: str) -> str:
    """One `key: value` setting as it may be shown."""
    return MASK if _is_secret_item(key, value) else redact_url(value)


def secrets_in_settings(data: Any) -> list[str]:
    """Secret values inside JSON-like `data`: secret-keyed strings and URL passwords."""
    found: list[str] = []
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            for key, value in item.items():
                if _is_secret_item(key, value):
                    found.append(str(value))
                    found.extend(url_secrets(str(value)))  # e.g. a JAAS config's password
                else:
                    stack.append(value)
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, str):
            found.extend(url_secrets(item))
    return found


def _is_secret_item(key: object, value: object) -> bool:
    return (
        isinstance(key, str)
        and isinstance(value, str | int | float)
        and not isinstance(value, bool)
        and value != ""
        and is_secret_key(key)
        and value not in DECLARED_WORDS.get(key, frozenset())
    )
