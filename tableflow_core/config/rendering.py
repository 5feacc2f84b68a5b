"""Jinja2 rendering of project files before YAML parsing.

Available in every file: `env_var('NAME', default)`, `var('name', default)` and
`target.name`. Rendering is strict: an undefined variable is an error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from tableflow_core.config.errors import ConfigError, ConfigProblem

_MISSING = object()


class _TargetContext:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name


def render_template(
    text: str,
    file: Path,
    variables: Mapping[str, Any],
    target_name: str,
    environ: Mapping[str, str] | None = None,
    strict_vars: bool = True,
) -> str:
    """Render `text`; errors name `file` and the template line.

    `strict_vars=False` is the first pass over the project file, made only to read
    its own `vars:` block: undefined project variables render as empty strings.
    """
    env_source = os.environ if environ is None else environ

    def env_var(name: str, default: Any = _MISSING) -> str:
        if name in env_source:
            return env_source[name]
        if default is _MISSING:
            raise _RenderError(
                f"environment variable {name!r} is not set and env_var() has no default"
            )
        return str(default)

    def var(name: str, default: Any = _MISSING) -> Any:
        if name in variables:
            return variables[name]
        if default is _MISSING:
            if not strict_vars:
                return ""
            raise _RenderError(
                f"project variable {name!r} is not defined in `vars` and var() has no default"
            )
        return default

    environment = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    try:
        template = environment.from_string(text)
        return template.render(env_var=env_var, var=var, target=_TargetContext(target_name))
    except _RenderError as exc:
        raise ConfigError([ConfigProblem(str(exc), file, _template_line(exc))]) from None
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(
            [ConfigProblem(f"template syntax error: {exc.message}", file, exc.lineno)]
        ) from None
    except jinja2.UndefinedError as exc:
        raise ConfigError(
            [ConfigProblem(f"template error: {exc.message}", file, _template_line(exc))]
        ) from None


class _RenderError(Exception):
    pass


def _template_line(exc: BaseException) -> int | None:
    """The template line a render-time exception was raised from, if jinja recorded it."""
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
