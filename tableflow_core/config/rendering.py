"""Jinja2 rendering of the string values of parsed project files (as dbt does).

Files are parsed as YAML first; then every string value holding `{{`, `{%` or `{#`
is rendered on its own. What a template produces is therefore always data: a secret
from `env_var()` with a `"`, `\\` or newline in it stays exactly that string and can
never add keys or break the file. Keys are not rendered.

A rendered value is always a string; the config models convert it where a field
wants a number or a boolean (`port: "{{ env_var('PORT', '8181') }}"` becomes 8181).

Available in every value: `env_var('NAME', default)`, `var('name', default)`,
`dev_stack('name')` (the project's own local stack: its addresses and credentials,
config/dev_stack.py) and `target.name`. Rendering is strict (an undefined variable is an
error) and runs in jinja's sandbox, bounded while it runs (issue 41), not only in its
result: each value renders in at most `MAX_RENDER_SECONDS` of CPU-bound template code
(a line tracer on the template's own frames counts steps and checks the clock), no
string, list or namespace value in it grows past `MAX_OUTPUT_CHARS` (`~`, `+`, `*`,
calls and filters checked, the ones that multiply sizes before they allocate:
`replace`, `join`, `indent`, `center`/`ljust`/`rjust`/`zfill`, `expandtabs`), `lipsum`
and `range` are bounded, and the output is counted as it streams out.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import filters as jinja_filters
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace, generate_lorem_ipsum

from tableflow_core.config.dev_stack import VALUES as STACK_VALUES
from tableflow_core.config.dev_stack import StackRecord, StackRecordError
from tableflow_core.config.errors import ConfigProblem
from tableflow_core.config.yaml_source import FieldPath, YamlDocument, dotted_path
from tableflow_core.errors import TableflowError

_MISSING = object()
TEMPLATE_MARKERS = ("{{", "{%", "{#")
MAX_OUTPUT_CHARS = 100_000
MAX_RANGE_ITEMS = 10_000
MAX_EXPONENT = 256
MAX_RENDER_SECONDS = 1.0
MAX_TEMPLATE_STEPS = 2_000_000  # lines of template code run for one value
MAX_LIPSUM_PARAGRAPHS = 100
MAX_LIPSUM_WORDS = 1000
_TEMPLATE_FILE = "<template>"
_CHECK_EVERY = 16  # template lines between two looks at the clock


class _TargetContext:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name


class RenderError(TableflowError):
    """A template in one value cannot be rendered (message is shown to the user)."""


# Widths and precisions in `%` and `str.format` specs: `'%999999999s' % x` allocates first.
_PERCENT_SPEC = re.compile(r"%[-+ #0]*(\d+|\*)?(?:\.(\d+|\*))?")
_BRACE_SPEC = re.compile(r"\{[^{}]*:[^{}]*?(\d+|\{)(?:\.(\d+|\{))?[^{}]*\}")


def _check_format(fmt: object) -> None:
    if not isinstance(fmt, str):
        return
    for pattern in (_PERCENT_SPEC, _BRACE_SPEC):
        for match in pattern.finditer(fmt):
            for group in match.groups():
                if group in ("*", "{") or (group and int(group) > MAX_OUTPUT_CHARS):
                    raise RenderError("format width or precision is too large")


def _bounded_width(filter_function: Callable[..., Any]) -> Callable[..., Any]:
    """A jinja filter whose numeric arguments (widths) are bounded."""

    def bounded(value: Any, *args: Any, **kwargs: Any) -> Any:
        for arg in (*args, *kwargs.values()):
            if isinstance(arg, int) and not isinstance(arg, bool) and arg > MAX_OUTPUT_CHARS:
                raise RenderError("filter width is too large")
        if filter_function is jinja_filters.do_format:
            _check_format(value)
        return filter_function(value, *args, **kwargs)

    return bounded


class _Budget:
    """The time and steps one value's rendering may still take (see `_tracing`)."""

    def __init__(self) -> None:
        self.deadline = time.monotonic() + MAX_RENDER_SECONDS
        self.steps = 0

    def tick(self, steps: int = 1) -> None:
        self.steps += steps
        if self.steps > MAX_TEMPLATE_STEPS:
            raise RenderError(f"template runs more than {MAX_TEMPLATE_STEPS:,} steps")
        if time.monotonic() > self.deadline:
            raise RenderError(f"template takes longer than {MAX_RENDER_SECONDS:g} s to render")


_BUDGETS: list[_Budget] = []  # the value being rendered (rendering is single-threaded)


def _tick() -> None:
    if _BUDGETS:
        _BUDGETS[-1].tick()


def _tracing(budget: _Budget) -> Callable[..., Any]:
    """A `sys.settrace` function counting the lines the template's own code runs
    (loops included, even empty ones) and checking the clock every `_CHECK_EVERY`."""
    counter = [0]

    def on_line(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            counter[0] += 1
            if counter[0] >= _CHECK_EVERY:
                budget.tick(counter[0])
                counter[0] = 0
        return on_line

    def on_call(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename == _TEMPLATE_FILE:
            return on_line
        return None

    return on_call


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str | list | tuple | dict) else 0


def _bounded(value: Any) -> Any:
    if _size(value) > MAX_OUTPUT_CHARS:
        raise RenderError(f"a value in the template grows past {MAX_OUTPUT_CHARS:,} characters")
    return value


def _too_large(estimate: int) -> None:
    if estimate > MAX_OUTPUT_CHARS:
        raise RenderError(
            f"a value in the template would grow past {MAX_OUTPUT_CHARS:,} characters"
        )


def _replace_estimate(text: str, old: Any, new: Any, count: Any = -1) -> int:
    if not isinstance(old, str) or not isinstance(new, str):
        return len(text)
    found = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    return len(text) + found * len(new)


def _estimate_str_method(name: str, text: str, args: tuple[Any, ...]) -> int:
    """What a `str` method that multiplies sizes would allocate (before it does)."""
    if name == "replace" and len(args) >= 2:
        return _replace_estimate(text, *args[:3])
    if name == "join" and args and isinstance(args[0], list | tuple):
        items = args[0]
        return sum(_size(item) for item in items) + len(text) * len(items)
    if name in ("center", "ljust", "rjust", "zfill") and args and isinstance(args[0], int):
        return max(len(text), args[0])
    if name == "expandtabs":
        width = args[0] if args and isinstance(args[0], int) else 8
        return len(text) + text.count("\t") * max(width, 0)
    return 0


def _checked_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """A jinja filter that ticks the budget, refuses size-multiplying arguments and
    results past the bound (its `jinja_pass_arg` marker kept by `functools.wraps`)."""

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        _tick()
        values = [a for a in args if isinstance(a, str)]
        text = values[0] if values else ""
        if name == "replace" and len(values) >= 3:
            _too_large(_replace_estimate(*values[:3]))
        if name == "indent":
            width = next((a for a in (*args, *kwargs.values()) if isinstance(a, int)), 4)
            _too_large(len(text) + (text.count("\n") + 1) * max(width, 0))
        if name == "join":
            sequence = next((a for a in args if isinstance(a, list | tuple)), ())
            _too_large(sum(len(str(item)) for item in sequence[: MAX_OUTPUT_CHARS + 1]))
        return _bounded(function(*args, **kwargs))

    return checked


class _BoundedNamespace(Namespace):
    """`namespace()`: `{% set ns.s = ns.s ~ ns.s %}` in a loop doubled a string until
    memory ran out; a value it holds is bounded like any other."""

    def __setitem__(self, name: str, value: Any) -> None:
        _tick()
        super().__setitem__(name, _bounded(value))


def _bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    """jinja's `lipsum`, bounded: `lipsum(100000)` ran 79 s and took 210 MB."""
    for value in (n, min, max):
        if not isinstance(value, int) or isinstance(value, bool):
            raise RenderError("lipsum() takes integer counts")
    if n > MAX_LIPSUM_PARAGRAPHS or max > MAX_LIPSUM_WORDS or min > MAX_LIPSUM_WORDS:
        raise RenderError(
            f"lipsum() of more than {MAX_LIPSUM_PARAGRAPHS} paragraphs or "
            f"{MAX_LIPSUM_WORDS} words each"
        )
    return str(_bounded(generate_lorem_ipsum(n=n, html=html, min=min, max=max)))


class _BoundedBuffer(list[Any]):
    """Where a `{% set %}` block, a macro or a call block collects its output: it never
    streams out, so it is counted here (10,000 loop turns of 100,000 characters filled
    a gigabyte before the value was looked at)."""

    length = 0

    def append(self, item: Any) -> None:
        self._count(item)
        super().append(item)

    def extend(self, items: Any) -> None:
        items = tuple(items)
        for item in items:
            self._count(item)
        super().extend(items)

    def _count(self, item: Any) -> None:
        _tick()
        self.length += len(item) if isinstance(item, str) else 1
        if self.length > MAX_OUTPUT_CHARS:
            raise RenderError(
                f"a block of the template renders past {MAX_OUTPUT_CHARS:,} characters"
            )


class _BoundedCodeGenerator(CodeGenerator):
    """Template code whose `~` concatenations and output buffers are bounded."""

    def buffer(self, frame: Frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.bounded_buffer()")

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """The sandbox (values from var() cannot be mutated either), plus limits on `*`, `**`,
    `%`, `str.format` widths, width filters and `range` so a value cannot eat the machine."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})
    code_generator_class = _BoundedCodeGenerator

    bounded_buffer = _BoundedBuffer

    @staticmethod
    def bounded_concat(values: tuple[Any, ...]) -> str:
        _tick()
        _too_large(sum(len(v) if isinstance(v, str) else 0 for v in values))
        return str(_bounded("".join(map(str, values))))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _tick()
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            _too_large(_estimate_str_method(getattr(__obj, "__name__", ""), owner, args))
        return _bounded(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, int | float) and abs(right) > MAX_EXPONENT:
            raise RenderError(f"exponent {right} is too large")
        if operator == "*":
            for seq, count in ((left, right), (right, left)):
                if (
                    isinstance(seq, str | list | tuple)
                    and isinstance(count, int)
                    and len(seq) * count > MAX_OUTPUT_CHARS
                ):
                    raise RenderError("repetition produces a value that is too large")
        if operator == "%":
            _check_format(left)
        if operator == "+":
            _too_large(_size(left) + _size(right))
        return _bounded(super().call_binop(context, operator, left, right))

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        _check_format(getattr(value, "__self__", None))
        return wrapped


def _bounded_range(*args: int) -> range:
    result = range(*args)
    if len(result) > MAX_RANGE_ITEMS:
        raise RenderError(f"range() of more than {MAX_RANGE_ITEMS} items")
    return result


_ENVIRONMENT = _BoundedSandbox(
    undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
)
_ENVIRONMENT.globals["range"] = _bounded_range
_ENVIRONMENT.globals["lipsum"] = _bounded_lipsum
_ENVIRONMENT.globals["namespace"] = _BoundedNamespace
for _name in ("center", "indent", "format"):
    _ENVIRONMENT.filters[_name] = _bounded_width(_ENVIRONMENT.filters[_name])
for _name, _function in list(_ENVIRONMENT.filters.items()):
    _ENVIRONMENT.filters[_name] = _checked_filter(_name, _function)


@dataclass(frozen=True)
class RenderContext:
    """What templates can see.

    `strict_vars=False` renders the project file's own `vars:` block: a var() not
    given on the command line renders as an empty string there. `dev_stack_dir`: where
    the target's local stack keeps its record (None: the target has no `dev_stack:`).
    """

    variables: Mapping[str, Any]
    target_name: str
    environ: Mapping[str, str] | None = None
    strict_vars: bool = True
    dev_stack_dir: Path | None = None
    _env: Mapping[str, str] = field(init=False, repr=False)
    # Every value env_var() returned: error messages must not echo them (they may be secrets).
    _env_values_read: set[str] = field(init=False, repr=False, default_factory=set)
    # dev_stack(): the record (read once), the names read, the secret values handed out.
    _stack_record: list[StackRecord | None] = field(init=False, repr=False, default_factory=list)
    stack_names_read: set[str] = field(init=False, repr=False, default_factory=set)
    stack_secrets_read: set[str] = field(init=False, repr=False, default_factory=set)
    # > 0 while rendering another target's section: dev_stack() gives placeholders there
    # (that target's stack is not the one this command talks to).
    _other_target: list[int] = field(init=False, repr=False, default_factory=lambda: [0])

    def __post_init__(self) -> None:
        object.__setattr__(self, "_env", os.environ if self.environ is None else self.environ)

    def env_var(self, name: Any, default: Any = _MISSING) -> str:
        if not isinstance(name, str):
            raise RenderError(f"env_var() needs a variable name string, not {type(name).__name__}")
        if name in self._env:
            value = self._env[name]
            self._env_values_read.add(value)
            return value
        if default is _MISSING:
            raise RenderError(
                f"environment variable {name!r} is not set and env_var() has no default"
            )
        return str(default)

    def dev_stack(self, name: Any) -> str:
        """A value of the project's own local stack; its placeholder before the first `dev up`."""
        if not isinstance(name, str) or name not in STACK_VALUES:
            known = ", ".join(STACK_VALUES)
            raise RenderError(f"dev_stack() knows {known}; not {name!r}")
        if self._other_target[0]:
            return STACK_VALUES[name].placeholder
        if self.dev_stack_dir is None:
            raise RenderError(
                f"dev_stack({name!r}) needs a `dev_stack:` section in target {self.target_name!r}"
            )
        if not self._stack_record:
            try:
                self._stack_record.append(StackRecord.read(self.dev_stack_dir))
            except StackRecordError as exc:
                raise RenderError(str(exc)) from None
        record = self._stack_record[0]
        self.stack_names_read.add(name)
        value = record.value(name) if record is not None else None
        if value is None:
            return STACK_VALUES[name].placeholder
        if STACK_VALUES[name].secret:
            self._env_values_read.add(value)
            self.stack_secrets_read.add(value)
        return value

    @property
    def stack_started(self) -> bool:
        """dev_stack() found the stack's record (`dev up` ran at least once)."""
        return bool(self._stack_record) and self._stack_record[0] is not None

    def redact(self, message: str) -> str:
        for value in sorted(self._env_values_read, key=len, reverse=True):
            if len(value) >= 3:
                message = message.replace(value, "**********")
        return message

    def var(self, name: Any, default: Any = _MISSING) -> Any:
        if not isinstance(name, str):
            raise RenderError(f"var() needs a variable name string, not {type(name).__name__}")
        if name in self.variables:
            return self.variables[name]
        if default is _MISSING:
            if not self.strict_vars:
                return ""
            raise RenderError(
                f"project variable {name!r} is not defined in `vars` and var() has no default"
            )
        return default


def is_template(value: object) -> bool:
    return isinstance(value, str) and any(marker in value for marker in TEMPLATE_MARKERS)


def render_value(text: str, context: RenderContext) -> str:
    """Render one value; raises RenderError with a message fit for the user."""
    try:
        template = _ENVIRONMENT.from_string(text)
        rendered = _render_bounded(template, context)
    except RenderError:
        raise
    except jinja2.TemplateSyntaxError as exc:
        raise RenderError(f"template syntax error: {exc.message}") from None
    except jinja2.UndefinedError as exc:
        raise RenderError(f"template error: {exc.message}") from None
    except jinja2.exceptions.SecurityError as exc:
        raise RenderError(f"template not allowed: {exc}") from None
    except (RecursionError, MemoryError):
        raise RenderError("template is too large or too deeply nested") from None
    except Exception as exc:
        # Anything else a template can do wrong (a TypeError from `var()` misuse,
        # a ZeroDivisionError...) is the user's template, not a crash of ours.
        raise RenderError(f"template error: {type(exc).__name__}: {exc}") from None
    if len(rendered) > MAX_OUTPUT_CHARS:
        raise RenderError(f"template renders to more than {MAX_OUTPUT_CHARS} characters")
    return rendered


def _render_bounded(template: jinja2.Template, context: RenderContext) -> str:
    """The template's output, streamed and counted, within the time and step budget."""
    budget = _Budget()
    previous = sys.gettrace()
    _BUDGETS.append(budget)
    sys.settrace(_tracing(budget))
    try:
        pieces: Iterator[str] = template.generate(
            env_var=context.env_var,
            var=context.var,
            dev_stack=context.dev_stack,
            target=_TargetContext(context.target_name),
        )
        output: list[str] = []
        length = 0
        for piece in pieces:
            length += len(piece)
            if length > MAX_OUTPUT_CHARS:
                raise RenderError(f"template renders to more than {MAX_OUTPUT_CHARS} characters")
            output.append(piece)
        return "".join(output)
    finally:
        sys.settrace(previous)
        _BUDGETS.pop()


def render_document(
    document: YamlDocument, context: RenderContext
) -> tuple[YamlDocument, list[ConfigProblem]]:
    """A copy of `document` with every string value rendered.

    Every failing value is reported (file, line, field), not just the first.
    """
    problems: list[ConfigProblem] = []
    data = render_tree(document, document.data, (), context, problems)
    return YamlDocument(file=document.file, data=data, lines=document.lines), problems


def render_tree(
    document: YamlDocument,
    value: Any,
    at: FieldPath,
    context: RenderContext,
    problems: list[ConfigProblem],
) -> Any:
    """`value` (found at `at` in `document`) with its string values rendered; never raises."""
    if isinstance(value, dict):
        other_target = len(at) == 2 and at[0] == "targets" and at[1] != context.target_name
        context._other_target[0] += other_target
        try:
            return {
                key: render_tree(document, item, (*at, str(key)), context, problems)
                for key, item in value.items()
            }
        finally:
            context._other_target[0] -= other_target
    if isinstance(value, list):
        return [
            render_tree(document, item, (*at, index), context, problems)
            for index, item in enumerate(value)
        ]
    if not is_template(value):
        return value
    try:
        return render_value(value, context)
    except RenderError as exc:
        problems.append(
            ConfigProblem(
                context.redact(str(exc)),
                document.file,
                document.line_of(at),
                dotted_path(at) or None,
            )
        )
        return value
