"""The study file (TOML), its validation, and the one mapping of its settings.

One `StudyConfig` describes a whole study (docs/design.md §2) and holds every setting's
default. `STUDY_COLUMNS` maps it onto the `studies` table and back (`study_columns`,
`config_from_columns`), `WORKER_SETTINGS` onto the precompute worker's settings
(`worker_settings`), and `SETTINGS` lists its settings by dotted name for the dashboard's
form: a new setting is a field here and a line in each mapping that stores or uses it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from app.crowd.registry import PLATFORMS
from app.models.enums import SpecialTop1, StudyType, Task
from app.studies.kinds import (
    check_kind_names,
    gap_of,
    kinds_refused,
    parse_kind,
    task_only_kinds,
)
from app.studytypes.ratings.config import RatingsSection
from app.validation import INT32_MAX, Line, Section, Text

# Strings as long as their columns (app/models/studies.py) or, for JSON settings, as long
# as any sensible value; no control characters anywhere (app/validation.py).
Name = Line(1024)
Short = Line(255)
Param = Line(64)
Url = Line(2048)
# A study file is a few sections deep; anything nested deeper is not a study file (and a
# deep enough one would exhaust the TOML parser's recursion).
MAX_DEPTH = 8

STUDY_KINDS = ("data", "model")
SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# Slugs a study may not take. `new` and `upload` are literal routes beside
# /dashboard/studies/{slug} (GET /dashboard/studies/new would never reach a study called
# `new`; tests/web/test_authorization_matrix.py derives such collisions from the routes);
# the others are the service's own top-level words, kept free so a URL naming a study
# is never mistaken for one of them.
RESERVED_SLUGS = frozenset(
    {
        "new",
        "upload",
        "mturk",
        "api",
        "static",
        "login",
        "logout",
        "dashboard",
        "users",
        "tokens",
        "docs",
        "healthz",
        "readyz",
        "admin",
    }
)
# The diagnostic kinds of translation studies (the first paper's forced prefixes DATA, NORMAL,
# UNREL, RAND are data, model, unrelated, random); `unrelated` (the first l words of another
# row's reference) means nothing without a source, so language models do not take it.  The
# kinds' registry and grammar: `app.studies.kinds`.
SEQ2SEQ_ONLY_KINDS = task_only_kinds("seq2seq")


def nesting_depth(value: object) -> int:
    """How deeply dicts and lists nest in `value` (iterative: any depth is safe to ask)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:  # past the limit the answer is already known
                children = node.values() if isinstance(node, dict) else node
                stack.extend((child, depth + 1) for child in children)
    return deepest


class ModelSection(Section):
    name: Name = Field(min_length=1, description="Hugging Face hub name or local directory")
    revision: Short | None = None
    tokenizer: Name | None = Field(None, description="defaults to the model's own")


class ReferenceSection(Section):
    """Synthetic EB-C (the papers' synthetic setting): a second model plays P_D.

    With a reference model the worker computes, for every item, the exact token-level
    d_TV, d_JS and d_GD between the two models' next-token distributions and the word-level
    d_GD that people are asked about (`worker.synthetic`); the results show them per cell.
    """

    model: Name | None = Field(None, description="P_D: hub name or local directory; none: off")
    revision: Short | None = None
    data_prefixes: Literal["dataset", "reference"] = Field(
        "dataset", description="data prefixes from the dataset, or sampled from the reference"
    )


class DatasetSection(Section):
    path: Name = Field(min_length=1)
    format: Literal["text", "jsonl", "tsv"] = "text"


class DecodingSection(Section):
    temperature: float = Field(1.0, gt=0, le=100)
    top_k: int | None = Field(
        None, ge=1, le=10_000_000, description="sampling top-k; None: full vocabulary"
    )
    top_p: float | None = Field(None, gt=0, le=1)
    beam_width: int = Field(10, ge=1, le=1000, description="seq2seq model prefixes")
    resample_on_eos: bool = Field(True, description="re-sample a prefix that ends too early")
    # The word search's longest choice word, in tokens.  Without a limit a model that keeps a
    # partial word probable token after token ("bpupbpupbpup...": seen with random weights, and
    # possible on odd inputs of real models) makes the search run one sequential forward per
    # token.  An item where a longer word could have been among the choices is flagged inexact
    # in its provenance.  0: no limit (the exact search, as for studies made before this setting;
    # 0 rather than null, which TOML cannot write).
    max_word_tokens: int = Field(
        16, ge=0, le=256, description="longest choice word in tokens; 0: no limit"
    )


# The first paper's forced-prefix samples (issue 34): a language model's continuations after
# data, model, random and shuffled prefixes (Table 1); a translation model's translations after
# DATA, NORMAL, UNREL and RAND target prefixes (Tables 5, 8, 9).
PAPER_SAMPLE_KINDS = {
    Task.lm: ("data", "model", "random", "data_shuffled"),
    Task.seq2seq: ("data", "model", "unrelated", "random"),
}


class SamplesSection(Section):
    """Forced-prefix samples (issue 34): what the model writes after ``per_kind`` prefixes of
    each kind and length, made by the worker when the study's items are done and shown as the
    paper's tables (never to annotators).  A language model continues prompt + prefix by
    ``words`` sampled words; a translation model translates on after the forced target prefix
    (its beam search, the source intact).  0 per kind: no samples."""

    per_kind: int = Field(
        0, ge=0, le=1000, description="forced-prefix samples per kind and length; 0: none"
    )
    lengths: list[int] = Field(
        default_factory=lambda: [3], min_length=1, max_length=10, description="prefix lengths"
    )
    kinds: list[str] = Field(
        default_factory=list, max_length=20, description="prefix kinds; empty: the paper's"
    )
    words: int = Field(20, ge=1, le=200, description="a language model's continuation words")

    @field_validator("lengths", "kinds", mode="before")
    @classmethod
    def _listed(cls, value: object) -> object:
        if isinstance(value, str):  # the dashboard's form: "3, 5"
            value = [v for v in re.split(r"[\s,;]+", value.strip()) if v]
        return value

    @field_validator("lengths")
    @classmethod
    def _lengths(cls, lengths: list[int]) -> list[int]:
        if any(n < 1 or n > 1000 for n in lengths) or len(set(lengths)) != len(lengths):
            raise ValueError("samples.lengths: distinct lengths between 1 and 1000 words")
        return sorted(lengths)

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, kinds: list[str]) -> list[str]:
        check_kind_names(kinds, "samples.kinds")
        gaps = [k for k in kinds if gap_of(k)]
        if gaps:
            raise ValueError(f"samples.kinds: {gaps}: samples are not made after a gap")
        return kinds

    def kinds_for(self, task: Task) -> list[str]:
        """The kinds sampled: the study file's, or the paper's for ``task``."""
        return list(self.kinds or PAPER_SAMPLE_KINDS[task])

    def continuation(self) -> dict[str, Any]:
        """How a language model's samples are continued (`PrefixSpec`'s and
        `RatingsSection`'s fields): ``words`` words, ancestral sampling.  The worker makes
        the samples (`worker.samples`) and a ratings study of them
        (`app.studies.samples.ratings_config`) with this one setting."""
        return {"continuation_words": self.words, "continuation_top_k": None}

    def check_study(self, config: Any) -> None:
        refused = kinds_refused(self.kinds_for(config.task), config.task.value)
        if refused:
            raise ValueError(f"samples.kinds: a {config.task.value} study cannot make {refused}")


class HitSection(Section):
    mix: dict[str, int] = Field(default_factory=lambda: {"data": 5, "model": 5}, max_length=20)
    attention: int = Field(1, ge=0, le=100, description="attention items per HIT")
    replicas: int = Field(1, ge=1, le=50)
    overlap_share: float = Field(0.05, ge=0, le=1)
    overlap_replicas: int = Field(3, ge=2, le=50)

    @field_validator("mix")
    @classmethod
    def _mix_counts(cls, mix: dict[str, int]) -> dict[str, int]:
        for kind, n in mix.items():
            parse_kind(kind)
            if not 0 <= n <= 1000:
                raise ValueError(f"mix count for {kind!r} must be between 0 and 1000")
        if sum(mix.values()) < 1:
            raise ValueError("a HIT needs at least one item")
        return mix


class AnnotatorSection(Section):
    per_annotator_cap: int = Field(200, ge=1, le=1_000_000)
    max_cell_share: float | None = Field(None, gt=0, le=1)
    lease_minutes: float = Field(30, gt=0, le=24 * 60)
    min_seconds_per_item: float = Field(1.0, ge=0, le=3600)


class ExclusionSection(Section):
    """Pre-declared exclusion rules, fixed before looking at EB-C."""

    blocked: bool = True
    attention_min_accuracy: float | None = Field(0.5, ge=0, le=1)
    too_fast: bool = True


class PaymentSection(Section):
    reward_cents: int = Field(0, ge=0, le=INT32_MAX, description="per assignment (one HIT)")
    platform_fee: float = Field(0.0, ge=0, le=2, description="share paid on top, e.g. 0.2")


# A choice id of one of Prolific's select filters (GET /api/v1/filters/ lists them).
ChoiceId = Line(64)


class ProlificPrescreeners(Section):
    """Who may take part, in Prolific's own filters (passed in the study-creation body as
    `filters`: `filter_id` with `selected_values` or `selected_range`). Languages and
    countries are the choice ids of Prolific's `first-language`, `fluent-languages` and
    `current-country-of-residence` filters (its filter list names them)."""

    first_languages: list[ChoiceId] = Field(default_factory=list, max_length=200)
    fluent_languages: list[ChoiceId] = Field(default_factory=list, max_length=200)
    countries: list[ChoiceId] = Field(default_factory=list, max_length=300)
    min_approval_rate: int | None = Field(None, ge=0, le=100, description="percent, e.g. 95")

    @field_validator("first_languages", "fluent_languages", "countries")
    @classmethod
    def _choice_ids(cls, ids: list[str]) -> list[str]:
        bad = [c for c in ids if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", c)]
        if bad:
            raise ValueError(f"Prolific choice ids are letters, digits, - or _, not {bad}")
        return ids


class ProlificSection(Section):
    # Channels are opt-in: a study takes nobody through Prolific unless this is set. An
    # entry must then carry the study's entry key (the dashboard shows the URL).
    enabled: bool = False
    # Prolific's own id of this study (24 hex digits): when set, an entry with another
    # STUDY_ID is refused.
    study_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    participant_param: Param = "PROLIFIC_PID"
    study_param: Param = "STUDY_ID"
    session_param: Param = "SESSION_ID"
    completion_code: Short | None = None
    redirect_url: Url | None = None
    prescreeners: ProlificPrescreeners = Field(default_factory=ProlificPrescreeners)

    @field_validator("participant_param", "study_param", "session_param")
    @classmethod
    def _param_name(cls, name: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name) or name == "key":
            raise ValueError(
                "a URL parameter name: letters, digits, '_', '-' or '.' (and not 'key', "
                "which carries the entry key)"
            )
        return name

    @field_validator("redirect_url")
    @classmethod
    def _http_only(cls, url: str | None) -> str | None:
        # The annotator's page links to it: a `javascript:` or `data:` URL would run there.
        if url is not None and not re.fullmatch(r"https?://[^\s/?#]+[^\s]*", url, re.IGNORECASE):
            raise ValueError("the redirect must be an http:// or https:// URL")
        return url


class MTurkSection(Section):
    # Opt-in, as every crowd channel. MTurk work counts in the results once its assignment
    # is confirmed through the MTurk API (until then it is stored, flagged unverified).
    enabled: bool = False
    sandbox: bool = True
    # Extra origins allowed as `turkSubmitTo` besides MTurk's own (a local stand-in in tests).
    submit_origins: list[Url] = Field(default_factory=list, max_length=20)
    # Who may work, applied when the study is published (`ebc crowd publish` flags and the
    # dashboard's publish form override them); the reward is `payment.reward_cents`.
    min_approval_rate: int | None = Field(None, ge=0, le=100, description="percent, e.g. 95")
    min_approved: int | None = Field(
        None, ge=0, le=10_000_000, description="approved HITs, e.g. 1000"
    )
    locales: list[str] = Field(
        default_factory=list, max_length=50, description="ISO 3166 country codes, e.g. US"
    )
    masters: bool = Field(False, description="Masters workers only (MTurk adds a 5% fee)")

    @field_validator("locales")
    @classmethod
    def _country_codes(cls, codes: list[str]) -> list[str]:
        bad = [c for c in codes if not re.fullmatch(r"[A-Z]{2}", c)]
        if bad:
            raise ValueError(f"locales are country codes such as US or GB, not {bad}")
        return codes


class ChannelSection(Section):
    """One section per crowd platform whose workers come by URL, named by the platform's
    one name; a section under a platform's former name (`Platform.former_names`: Prolific
    was `[channels.panel]`) is read as the platform's."""

    prolific: ProlificSection = Field(default_factory=ProlificSection)
    mturk: MTurkSection = Field(default_factory=MTurkSection)

    @model_validator(mode="before")
    @classmethod
    def _former_names(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        for platform in PLATFORMS.values():
            for former in platform.former_names:
                if former not in data:
                    continue
                if platform.name in data:
                    raise ValueError(
                        f"[channels.{former}] is the former name of [channels.{platform.name}]: "
                        "give one of them"
                    )
                data = {platform.name if k == former else k: v for k, v in data.items()}
        return data


class ParticipantsSection(Section):
    """What every participant sees besides the HITs, whatever the study's type and channel,
    and who may take part (`app.annotation.participants`)."""

    # Shown once, before the first HIT; no HIT (and no answer) without it. Empty: no page.
    consent: Text(20_000) = Field(
        "", description="consent text accepted once before the first HIT; empty: none"
    )
    comments: bool = Field(True, description="a comment box after each HIT and at the end")
    # People who took part in these earlier studies (slugs) may not take part in this one:
    # our records on every channel, and the platform's own filter where it has one.
    exclude_studies: list[str] = Field(default_factory=list, max_length=50)

    @field_validator("exclude_studies", mode="before")
    @classmethod
    def _slugs(cls, value: object) -> object:
        if isinstance(value, str):  # the dashboard's form: "pilot-1, pilot-2"
            value = [v for v in re.split(r"[\s,;]+", value.strip()) if v]
        if isinstance(value, list):
            bad = [v for v in value if not (isinstance(v, str) and SLUG.fullmatch(v))]
            if bad:
                raise ValueError(f"exclude_studies are study slugs, not {bad[:3]}")
            if len(set(value)) != len(value):
                raise ValueError("exclude_studies names a study twice")
        return value


class StudyConfig(Section):
    slug: str = Field(pattern=SLUG.pattern)
    title: Short = Field(min_length=1)
    description: Text(20_000) = ""
    task: Task = Task.lm
    type: StudyType = Field(
        StudyType.nextword, description="nextword (EB-C) or ratings of continuations (EB-M)"
    )
    model: ModelSection
    dataset: DatasetSection
    reference: ReferenceSection = Field(default_factory=ReferenceSection)
    prefix_lengths: list[int] = Field(min_length=1, max_length=100)
    kinds: list[str] = Field(default_factory=lambda: list(STUDY_KINDS), max_length=20)
    items_per_cell: int = Field(ge=1, le=1_000_000)
    top_k: int = Field(5, ge=2, le=10)
    prompt_words: int = Field(0, ge=0, le=512)
    decoding: DecodingSection = Field(default_factory=DecodingSection)
    special_top1: SpecialTop1 = SpecialTop1.skip
    seed: int = Field(0, ge=0, lt=2**63)
    hits: HitSection = Field(default_factory=HitSection)
    annotators: AnnotatorSection = Field(default_factory=AnnotatorSection)
    exclusions: ExclusionSection = Field(default_factory=ExclusionSection)
    payment: PaymentSection = Field(default_factory=PaymentSection)
    channels: ChannelSection = Field(default_factory=ChannelSection)
    participants: ParticipantsSection = Field(default_factory=ParticipantsSection)
    ratings: RatingsSection = Field(default_factory=RatingsSection)
    samples: SamplesSection = Field(default_factory=SamplesSection)

    @model_validator(mode="before")
    @classmethod
    def _shallow(cls, data: object) -> object:
        if nesting_depth(data) > MAX_DEPTH:
            raise ValueError(f"the study file nests deeper than {MAX_DEPTH} levels")
        return data

    @field_validator("slug")
    @classmethod
    def _slug_not_reserved(cls, slug: str, info: ValidationInfo) -> str:
        # A study stored before a word was reserved still loads (`config_from_columns`).
        if slug in RESERVED_SLUGS and not (info.context or {}).get("stored"):
            raise ValueError(
                f"{slug!r} is reserved (it names a page of the service); choose another slug"
            )
        return slug

    @field_validator("prefix_lengths")
    @classmethod
    def _lengths(cls, lengths: list[int]) -> list[int]:
        if any(n < 1 or n > 1000 for n in lengths):
            raise ValueError("prefix lengths must be between 1 and 1000 words")
        if len(set(lengths)) != len(lengths):
            raise ValueError("prefix lengths must be distinct")
        return sorted(lengths)

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, kinds: list[str]) -> list[str]:
        check_kind_names(kinds)
        missing = [k for k in STUDY_KINDS if k not in kinds]
        if missing:
            raise ValueError(f"EB-C needs both 'data' and 'model' prefixes; missing {missing}")
        return kinds

    @model_validator(mode="after")
    def _consistent(self) -> StudyConfig:
        unknown = sorted(set(self.hits.mix) - set(self.kinds))
        if unknown:
            raise ValueError(f"hits.mix names kinds the study does not make: {unknown}")
        if self.task is Task.seq2seq:
            if self.prompt_words:
                raise ValueError("a prompt applies to language models only (task = 'lm')")
            if self.dataset.format == "text":
                raise ValueError("seq2seq needs source and reference: dataset format jsonl or tsv")
            if self.reference.data_prefixes == "reference":
                raise ValueError(
                    "a translation study takes its data prefixes from the references "
                    "(reference.data_prefixes = 'dataset')"
                )
            gaps = [k for k in kinds_refused(self.kinds, "seq2seq") if gap_of(k)]
            if gaps:
                raise ValueError(
                    f"{gaps}: a gap kind (the later paper's self-recovery) is for language "
                    "models (task = 'lm')"
                )
        else:
            lm_only = sorted(set(self.kinds) & set(SEQ2SEQ_ONLY_KINDS))
            if lm_only:
                raise ValueError(
                    f"{lm_only}: the prefix of another row's reference is a translation "
                    "diagnostic (task = 'seq2seq')"
                )
        for kind in self.kinds:
            g = gap_of(kind)
            if g and not any(n + g in self.prefix_lengths for n in self.prefix_lengths):
                raise ValueError(
                    f"{kind!r}: EB-C_gap compares it at length l with the data prefix of l + {g} "
                    f"words; add a prefix length l + {g} for some l of {self.prefix_lengths}"
                )
        # A study type's own section checks a study of its type (app.studytypes.<type>.config).
        self.ratings.check_study(self)
        self.samples.check_study(self)
        if self.slug in self.participants.exclude_studies:
            raise ValueError("participants.exclude_studies names this study itself")
        if self.reference.data_prefixes == "reference" and not self.reference.model:
            raise ValueError("reference.data_prefixes = 'reference' needs reference.model")
        return self


# -- the one mapping of the settings -------------------------------------------------------


def _settings(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    for name, info in model.model_fields.items():
        section = info.annotation
        if isinstance(section, type) and issubclass(section, Section):
            yield from _settings(section, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", info


SETTINGS: dict[str, FieldInfo] = dict(_settings(StudyConfig))
"""Every setting of a study file by dotted name (`decoding.top_k`), in the file's order."""


def setting(config: BaseModel, path: str) -> Any:
    """The value of the setting (or section) `path` of `config`."""
    value: Any = config
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _same(value: Any) -> Any:
    return value


def _dump(section: BaseModel) -> dict[str, Any]:
    return section.model_dump()


@dataclass(frozen=True)
class Column:
    """A column of the `studies` table and the setting (or section) of `StudyConfig` it holds.

    `store` makes the column's value from the setting, `load` the setting back from it. A
    section may be spread over several columns: `load` then gives part of it, as a dict.
    """

    name: str
    setting: str
    store: Callable[[Any], Any] = _same
    load: Callable[[Any], Any] = _same


STUDY_COLUMNS = (
    Column("slug", "slug"),
    Column("title", "title"),
    Column("description", "description"),
    Column("task", "task"),
    Column("study_type", "type"),
    Column("model_name", "model.name"),
    Column("model_revision", "model.revision"),
    Column("tokenizer_name", "model.tokenizer"),
    Column("dataset_path", "dataset.path"),
    # Stored before synthetic EB-C existed: NULL, no reference model.
    Column("reference", "reference", _dump, lambda stored: stored or {}),
    Column("dataset_format", "dataset.format"),
    Column("prefix_lengths", "prefix_lengths", list),
    Column("kinds", "kinds", list),
    Column("items_per_cell", "items_per_cell"),
    Column("top_k", "top_k"),
    Column("prompt_words", "prompt_words"),
    # A study stored before `max_word_tokens` existed searched without a limit (0), and its
    # retried shards must make the items its other shards made.
    Column("decoding", "decoding", _dump, lambda stored: {"max_word_tokens": 0, **stored}),
    Column("special_top1", "special_top1"),
    Column("seed", "seed"),
    Column("hit_layout", "hits", lambda hits: {"mix": dict(hits.mix), "attention": hits.attention}),
    Column("replicas", "hits.replicas"),
    Column("overlap_share", "hits.overlap_share"),
    Column("overlap_replicas", "hits.overlap_replicas"),
    Column("per_annotator_cap", "annotators.per_annotator_cap"),
    Column("max_cell_share", "annotators.max_cell_share"),
    Column("lease_seconds", "annotators.lease_minutes", lambda m: round(m * 60), lambda s: s / 60),
    Column(
        "min_ms_per_item",
        "annotators.min_seconds_per_item",
        lambda s: round(s * 1000),
        lambda ms: ms / 1000,
    ),
    Column("exclusions", "exclusions", _dump),
    Column("channels", "channels", _dump),
    # Stored before issue 33: NULL, the defaults (no consent page, comment boxes on).
    Column("participants", "participants", _dump, lambda stored: stored or {}),
    # Stored before ratings studies existed: NULL, the defaults.
    Column("ratings", "ratings", _dump, lambda stored: stored or {}),
    # Stored before issue 34: NULL, no forced-prefix samples.
    Column("samples", "samples", _dump, lambda stored: stored or {}),
    Column("reward_cents", "payment.reward_cents"),
    Column("platform_fee", "payment.platform_fee"),
)


def study_columns(config: StudyConfig) -> dict[str, Any]:
    """`config` as the columns of a `studies` row."""
    return {c.name: c.store(setting(config, c.setting)) for c in STUDY_COLUMNS}


def config_from_columns(row: Any) -> StudyConfig:
    """The study file that a `studies` row (or anything with its columns) holds."""
    raw: dict[str, Any] = {}
    for column in STUDY_COLUMNS:
        *parents, last = column.setting.split(".")
        target = raw
        for part in parents:
            target = target.setdefault(part, {})
        value = column.load(getattr(row, column.name))
        if isinstance(value, dict):  # a section, or part of one: merged, the row left as is
            target.setdefault(last, {}).update(value)
        else:
            target[last] = value
    # Validated as stored: a slug reserved after the study was made must not break its pages.
    return StudyConfig.model_validate(raw, context={"stored": True})


@dataclass(frozen=True)
class WorkerSetting:
    """A setting of the precompute worker (`worker.prefixes.PrefixSpec`) and its source.
    A study type's section adds its own for studies of that type (`worker_settings`: the
    others keep the worker's default; a next-word study's items have no continuation)."""

    name: str
    setting: str
    convert: Callable[[Any], Any] = _same


WORKER_SETTINGS = (
    WorkerSetting("top_k", "top_k"),
    WorkerSetting("prompt_words", "prompt_words"),
    WorkerSetting("temperature", "decoding.temperature"),
    WorkerSetting("sample_top_k", "decoding.top_k"),
    WorkerSetting("sample_top_p", "decoding.top_p"),
    WorkerSetting("eos_policy", "decoding.resample_on_eos", lambda r: "resample" if r else "skip"),
    WorkerSetting("num_beams", "decoding.beam_width"),
    WorkerSetting("max_word_tokens", "decoding.max_word_tokens", lambda n: n or None),  # 0: none
    WorkerSetting("special_policy", "special_top1", lambda policy: policy.value),
)


def worker_settings(config: StudyConfig) -> dict[str, Any]:
    """The settings the worker makes `config`'s items with, by the worker's names (a study
    type's section adds its own: a ratings study's continuations)."""
    settings = {s.name: s.convert(setting(config, s.setting)) for s in WORKER_SETTINGS}
    return settings | config.ratings.worker_settings(config)


WORKER_DEFAULTS: dict[str, Any] = worker_settings(StudyConfig.model_construct())
"""`worker_settings` of a study file that sets none of them: the file's defaults."""
