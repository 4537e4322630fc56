"""The dashboard's study form: flat fields in, a `StudyConfig` or messages per field out.

Field names are the study file's keys joined with dots (`model.name`,
`hits.mix`), so a pydantic error's `loc` names the field it belongs to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from app.studies.schemas import SETTINGS, DatasetSection, ModelSection, StudyConfig
from app.validation import INT64_MAX, BadInput, parse_int

OPTIONAL_KINDS = ("data_shuffled", "random")
# The study file's settings: the crowd channels are opened in the study file (their page
# settings and MTurk origins are not a form's business), so a form-made study is invite-only.
FIELDS = tuple(name for name in SETTINGS if not name.startswith("channels."))
# Checkboxes: absent from a submitted form means False.
BOOLEAN_FIELDS = tuple(name for name in FIELDS if SETTINGS[name].annotation is bool)
# Errors of the whole-study check carry no field: place them by what they say.
_MODEL_CHECKS = (
    ("hits.mix names", "hits.mix"),
    ("a prompt applies", "prompt_words"),
    ("seq2seq needs", "dataset.format"),
    ("seq2seq studies support", "kinds"),
    ("samples.kinds:", "samples.kinds"),
)


@dataclass
class FormErrors(Exception):
    """Messages keyed by field name ("" for the form as a whole)."""

    errors: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, message: str) -> None:
        self.errors.setdefault(name, message)


def form_defaults() -> dict[str, str]:
    """The form's initial values: the study file's defaults, the paper's lengths and counts."""
    example = StudyConfig(
        slug="x",
        title="x",
        model=ModelSection(name="x"),
        dataset=DatasetSection(path="x"),
        prefix_lengths=[10, 20, 30],
        items_per_cell=3000,
    )
    values = form_values(example)
    for name in ("slug", "title", "model.name", "dataset.path"):
        values[name] = ""
    return values


def form_values(config: StudyConfig) -> dict[str, str]:
    """A study's configuration as form values (to show an uploaded file's values)."""
    data = config.model_dump(mode="json")
    values = {}
    for name in FIELDS:
        value: Any = data
        for part in name.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        values[name] = _show(value)
    values["kinds"] = ",".join(config.kinds)
    return values


def _show(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "on" if value else ""
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if hasattr(value, "value"):
        return str(value.value)
    return str(value)


def _split(text: str) -> list[str]:
    return [t for t in re.split(r"[\s,;]+", text.strip()) if t]


def _number(text: str) -> int | str:
    try:
        return parse_int(text, ge=-INT64_MAX, le=INT64_MAX)
    except BadInput:
        return text  # pydantic names the bad entry


def config_from_form(form: Mapping[str, Any], kinds: list[str]) -> StudyConfig:
    """Validate the submitted form; raise `FormErrors` with one message per bad field.

    `kinds` holds the checked kind boxes; `form["kinds_extra"]` adds corrupted and gap kinds
    (`data_corrupted@0.3`, `data_shuffled+gap@5`). Empty optional fields take the study
    file's defaults.
    """
    errors = FormErrors()
    raw: dict[str, Any] = {}

    def put(name: str, value: Any) -> None:
        target = raw
        *parents, last = name.split(".")
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value

    for name in FIELDS:
        if name in ("kinds", "prefix_lengths", "hits.mix") or name in BOOLEAN_FIELDS:
            continue
        value = str(form.get(name) or "").strip()
        if value:
            put(name, value)
    for name in BOOLEAN_FIELDS:
        put(name, bool(form.get(name)))
    lengths = _split(str(form.get("prefix_lengths") or ""))
    if lengths:
        put("prefix_lengths", [_number(t) for t in lengths])
    put("kinds", [*kinds, *_split(str(form.get("kinds_extra") or ""))])
    mix_text = str(form.get("hits.mix") or "").strip()
    if mix_text:
        mix: dict[str, Any] = {}
        for part in _split(mix_text):
            kind, eq, count = part.partition("=")
            if not eq or not kind:
                errors.add("hits.mix", "write the mix as kind=count pairs, e.g. data=5, model=5")
                break
            mix[kind] = _number(count)
        else:
            put("hits.mix", mix)
    raw.setdefault("model", {}).setdefault("name", "")
    raw.setdefault("dataset", {}).setdefault("path", "")
    try:
        config = StudyConfig.model_validate(raw)
    except ValidationError as exc:
        for name, message in field_errors(exc).items():
            errors.add(name, message)
        raise errors from None
    if errors.errors:
        raise errors
    return config


def field_errors(exc: ValidationError) -> dict[str, str]:
    """One readable message per form field from a StudyConfig ValidationError."""
    out: dict[str, str] = {}
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        name = ""
        for n in range(len(loc), 0, -1):
            candidate = ".".join(loc[:n])
            if candidate in FIELDS:
                name = candidate
                break
        message = _friendly(err)
        if not name:
            name = next((f for start, f in _MODEL_CHECKS if message.startswith(start)), "")
            if not name and loc:
                message = f"{'.'.join(loc)}: {message}"
        out.setdefault(name, message)
    return out


def _friendly(err: Any) -> str:
    if err["type"] == "missing" or (
        err["type"] == "string_too_short" and err.get("ctx", {}).get("min_length") == 1
    ):
        return "This field is required."
    if err["type"] == "string_pattern_mismatch" and tuple(err["loc"]) == ("slug",):
        return "Use 1 to 64 lowercase letters, digits, - or _, starting with a letter or digit."
    return str(err["msg"]).removeprefix("Value error, ")
