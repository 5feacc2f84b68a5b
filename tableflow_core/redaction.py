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

# What a key says a value is, read word by word (`spark.ssl.keyStorePassword` ->
# spark, ssl, key, store, password): the shapes of credential names in the Kafka,
# librdkafka, AWS, Spark, Hadoop s3a/abfs/gcs and Iceberg configuration references.
# A word holding one of these is a secret (`sasl.password`, `s3.session-token`,
# `header.Authorization`, `client_secret`, `aws_secret_access_key`).
_SECRET_WORD_PARTS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "credential",
    "token",
    "jaas",
    "authorization",
    "cookie",
    "signature",
    "userinfo",
)
# A secret word followed by one of these names something *about* the secret, not it
# (`sasl.oauthbearer.token.endpoint.url`, `basic.auth.credentials.source`,
# `s3.session-token-expires-at-ms`, `fs.azure.sas.token.provider.type`).
_ABOUT_WORDS = frozenset(
    {
        "endpoint", "url", "uri", "type", "provider", "source", "file", "location", "path",
        "ttl", "lifetime", "expiry", "expires", "enabled", "impl", "class", "algorithm",
    }
)  # fmt: skip
# Words that are secrets by themselves (`db_pass`, `mysql_pwd`).
_SECRET_WORDS = frozenset({"pass", "pwd", "pw", "passwd", "apikey", "sessionkey"})
# `<qualifier> key` is key material (`s3.sse.key`, `fs.s3a.encryption.key`,
# `adls.account-key`, `api_key`, `ssl.keystore.key`); a bare `key` (a record key, a
# column) and `ssl.key.location` (a path) are not.
_KEY_QUALIFIERS = frozenset(
    {
        "access", "account", "aes", "api", "app", "auth", "client", "crypto", "customer",
        "decryption", "encryption", "encrypt", "hmac", "keystore", "license", "master",
        "private", "sas", "secret", "session", "shared", "signing", "sse", "storage",
    }
)  # fmt: skip
# What may follow such a `key` and keep it key material (`s3.access-key-id`,
# `ssl.key.pem`); anything else (`encryption.keySizeBits`) is about the key, not it.
_KEY_TRAILERS = frozenset({"id", "pem", "value", "data", "base64", "b64", "material", "md5"})
# Query parameters that carry credentials in URLs only (`?key=...` of an API key,
# Azure SAS `sig`, AWS presigned `X-Amz-Credential`).
_URL_SECRET_PARAMS = frozenset({"key", "sig", "code", "auth", "access_key", "apikey"})
# Settings whose key reads as secret but which declare a mode by one of a few words
# (`storage.credentials: vended`, validated by the config model): the word is shown as
# it is; any other value under such a key stays masked. Keyed by the exact key name.
DECLARED_WORDS: dict[str, frozenset[str]] = {
    "credentials": frozenset({"static", "vended", "default-chain"}),
}
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# The whole userinfo of a URL (`user:password@`, `token@`). The password runs to the
# authority's last `@`: passwords may hold `@`.
_URL_USERINFO = re.compile(
    r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@\s:]*)(?::(?P<pw>[^\s/]+))?@"
)
# `name=value` pairs: query strings, JDBC URLs, JAAS configs (quoted), log lines.
_PARAM = re.compile(
    r"(?P<sep>^|[^A-Za-z0-9._-])(?P<name>[A-Za-z0-9._-]+)="
    r"(?:\"(?P<quoted>[^\"]*)\"|(?P<value>[^&;\s\"',]*))"
)


def key_words(key: str) -> list[str]:
    """`spark.ssl.keyStorePassword` -> ['spark', 'ssl', 'key', 'store', 'password']."""
    return [word.lower() for word in _WORD.findall(key)]


def is_secret_key(key: str) -> bool:
    """True for setting names that hold secrets (`sasl.password`, `s3.secret-access-key`,
    `ssl.key.pem`, `header.Authorization`, `s3.sse.key`, `db_pass`)."""
    words = key_words(key)
    for index, word in enumerate(words):
        if word in _SECRET_WORDS or any(part in word for part in _SECRET_WORD_PARTS):
            if words[index + 1 : index + 2] and words[index + 1] in _ABOUT_WORDS:
                continue
            return True
        if word.endswith("key") and word[:-3] in _KEY_QUALIFIERS:  # `accesskey`
            return True
        if word == "key" and _is_key_material(words, index):
            return True
        if word == "user" and words[index + 1 : index + 2] == ["info"]:  # basic.auth.user.info
            return True
    return False


def _is_key_material(words: list[str], index: int) -> bool:
    after = words[index + 1 : index + 2]
    if after == ["pem"]:  # `ssl.key.pem`, `client.key.pem`: a private key itself
        return True
    qualified = index > 0 and words[index - 1] in _KEY_QUALIFIERS
    return qualified and (not after or after[0] in _KEY_TRAILERS or words[index - 1] == "account")


def _secret_param(match: re.Match[str]) -> bool:
    name = match.group("name")
    if is_secret_key(name):
        return True
    return match.group("sep") in ("?", "&", ";") and name.lower() in _URL_SECRET_PARAMS


def url_secrets(text: str) -> list[str]:
    """The credentials a URL carries: its userinfo (the password; the user when there is
    no password, e.g. a token) and secret query parameters."""
    found: list[str] = []
    for match in _URL_USERINFO.finditer(text):
        found.append(match.group("pw") or match.group("user") or "")
    for match in _PARAM.finditer(text):
        if _secret_param(match):
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
    """`url` with its userinfo's password (or a userinfo that is only a token) and secret
    parameters masked."""
    return _PARAM.sub(_masked_param, _URL_USERINFO.sub(_masked_userinfo, url))


def _masked_userinfo(match: re.Match[str]) -> str:
    if match.group("pw") is not None:
        return f"{match.group('head')}{match.group('user')}:{MASK}@"
    if not match.group("user"):
        return match.group(0)
    return f"{match.group('head')}{MASK}@"


def _masked_param(match: re.Match[str]) -> str:
    if not _secret_param(match):
        return match.group(0)
    head = match.group("sep") + match.group("name") + "="
    if match.group("quoted") is not None:
        return f'{head}"{MASK}"'
    return head + MASK


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
