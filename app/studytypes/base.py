"""What a study type provides: the interface of a plug-in of `app.studytypes.registry`.

A study type is what people do in a study (``StudyType``: pick the next word, rate
continuations) and everything that follows from it: the items the worker makes and how they
go into HITs, the annotator's page and what a submission stores, the results document and
its downloads, the simulations and the dashboard's pages. Each type is one package under
``app/studytypes/`` whose ``plugin.py`` makes one :class:`StudyTypePlugin`; the rest of the
code asks the registry (``STUDY_TYPES[study.study_type]``) and the type's declared
capabilities, never a type's name.

A plug-in is a few words (its label, its nouns, its crowd posting's defaults), a few
namespaces of functions, each a module of the type's package that implements one of the
protocols below (``hits``: :class:`HitRules`; ``pages``: :class:`Pages`; ``results``:
:class:`Results`; ``dashboard``: :class:`Dashboard`; ``preview``: :class:`Preview`;
``http_crowd``: :class:`HttpCrowd`), its downloads, and the capabilities a type may lack,
``None`` where it does (``diagnostics``, ``planner``, ``scores``, an offline batch): the
callers then say so in the type's own words (:meth:`StudyTypePlugin.refusal`; a 404 on the
web). Options of the results that a type does not take are refused, never ignored
(:class:`OptionNotForThisType`, a 422 that names them).

What a type's code shares with the other types' is public in the shared modules
(``app.results.*``, ``app.annotation.*``, ``app.simulate.*``, ``app.hits.*``), never a
private name of another module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy.orm import Session

from app.models import Study, StudyType
from app.validation import BadInput


class OptionNotForThisType(BadInput):
    """Options a study's type does not take, given anyway: refused rather than ignored (a
    4xx; ``fields`` names them, ``field`` the first)."""

    def __init__(self, message: str, fields: list[str]) -> None:
        super().__init__(message)  # the message names the fields
        self.field = fields[0]
        self.fields = fields


Chunks = Callable[[Session, Study], Iterator[str]]
"""A streamed download: its text chunks, read in a session of the caller's own."""
Render = Callable[[Session, Study, Any, bool], str | bytes]
"""A download made at once from (session, study, the results' options, paper)."""


@dataclass(frozen=True)
class DownloadSpec:
    """One of a type's downloads: its media type, and either its chunks (streamed) or how
    it is rendered."""

    media_type: str
    chunks: Chunks | None = None
    render: Render | None = None


# -- what every type provides: namespaces of functions (a module of its package each) ------


class HitRules(Protocol):
    """What the type's items need of the dataset, and how they go into HITs
    (``app.hits.service.build_hits`` builds them)."""

    def words_after_prefix(self, study: Study) -> int:
        """Words a data prefix's dataset line must hold after it (the true next word: 1)."""

    def placeable(self, query: Any) -> Any:
        """`query` of a study's unplaced, shown items narrowed to those that may go into a
        HIT."""

    def attention_ready(self, row: Any, min_prob: float) -> bool:
        """Whether an item (a row with ``is_attention``, ``choices``, ``true_next_word``,
        ``provenance``) may be one of a HIT's attention items."""

    def screen_order(self, screen: list[int]) -> list:
        """A position's stored screen order from its shuffled choices' ranks."""

    def load_attention_items(
        self, session: Session, study: Study, rows: Iterable[Mapping[str, object]]
    ) -> int:
        """Add a researcher's attention file (``ebc hits build --attention``); how many
        items; ``HitBuildError`` where the type takes none."""


class Pages(Protocol):
    """The annotator's side of a HIT (``app.annotation.pages`` calls these)."""

    def page(
        self,
        session: Session,
        lease: Any,
        study: Any,
        now: Any,
        *,
        first_hit: bool,
        refused: tuple[Exception, Mapping[str, str]] | None = None,
    ) -> Any:
        """The assigned HIT's page (an ``app.annotation.schemas.PageView``: its template and
        what it shows; None: nothing left to show), the HIT recorded as served. `refused`:
        the form just refused and why, on the page shown again."""

    def send(self, session: Session, annotator: Any, form: Mapping[str, str]) -> Any:
        """Store a posted page (``app.annotation.schemas.Sent``), or refuse it with an
        ``app.annotation.errors.FormRefused`` (its page is shown again). Call with the
        annotator locked."""

    def mturk_fields(self, session: Session, assignment: Any) -> list[tuple[str, str]]:
        """What the MTurk done page posts on to MTurk so that its copy (the answer XML)
        can restore ours: form fields of positions and what was chosen, never a rank or a
        kind."""

    def store_copy(
        self, session: Session, study: Study, annotator: Any, lease: Any, copy: Any, when: Any
    ) -> None:
        """Store a copy of a HIT's answers that reached a platform but not us
        (``app.crowd.recovery.RecoveredSubmission``), as of `when`, by the rules of a live
        submission; refuse one that does not fit (``AnnotationError``)."""


class Results(Protocol):
    """The type's results: its document, its answers, its options."""

    def document(self, session: Session, study: Study, query: Any, *, started: float) -> Any:
        """The study's results document (``app.results.schemas.ResultsOut``) for the
        results' options `query` (options the type does not take raise
        :class:`OptionNotForThisType`). Reads; never commits."""

    def check_options(self, query: Any) -> None:
        """Refuse results' options given that this type does not take
        (:class:`OptionNotForThisType`)."""

    def text(self, res: Any, fmt: str, label: str, *, paper: bool) -> str:
        """``ebc results STUDY -f FMT``: the document as ``csv``, ``latex`` (`label`: the
        table's row label; `paper`: the paper-comparable mean +- std) or a plain-text
        ``table`` for the terminal (``json`` is the document itself, for every type)."""

    def quality(self, session: Session, study: Study) -> dict[int, Any]:
        """Per annotator id, the quality figures of the Annotators page (no error bars)."""

    def answers(self, session: Session, study: Study) -> Any:
        """The study's counted answers (judgments, ratings) as the columns the exclusion
        rules read (``app.results.exclusions.Answers``)."""

    def answers_per_cell(self, session: Session, items: Any) -> Mapping[tuple[int, str], tuple]:
        """Per (length, kind) of the items matching `items` (a condition on ``Item``), the
        answers they got and, for a type whose answers come in steps, how many are
        complete (else None): ``(n, n_complete)`` for every cell (``(0, ...)`` where
        none): the study page's collection table."""


class Dashboard(Protocol):
    """The type's parts of the researcher's pages."""

    def results_page(
        self, session: Session, study: Study, options: Any, *, costs: Any = None
    ) -> tuple[str, dict]:
        """The results page: its template and context, from the page's options
        (``results_query()``: the results' options; ``target()``: the planner's); `costs`
        prices a planner's plan on each channel (``app.simulate.costs.plan_costs`` with the
        study and the settings bound; None: no prices)."""

    def annotators_context(self, study: Study) -> dict[str, Any]:
        """What the type's partials of the Annotators page read besides ``quality``
        (``<type>/_annotators_head.html``, ``<type>/_annotators_row.html``)."""


class Preview(Protocol):
    """ "Simulate before you pay": the type's simulated crowd on a study's design, R times,
    through the type's results (the study page's section, its own page and
    ``ebc simulate``)."""

    OPTIONS: type[Any]
    """Its options (a pydantic model: the form's fields and the CLI's flags)."""
    TEMPLATE: str
    """The section of the study page and the simulate page."""

    def form_values(self, values: Mapping[str, str]) -> dict[str, str]:
        """What the form shows: the values given, the defaults for the others."""

    def options_from_form(self, values: Mapping[str, str], limits: Any) -> Any:
        """The form as options, or ``app.simulate.preview.PreviewError`` per field."""

    def run(self, study: Study, settings: Any, options: Any, *, limits: Any, price: Any) -> Any:
        """The preview within `limits` (``app.simulate.preview.Limits``), each channel
        priced by `price` (``app.simulate.costs.channel_costs``)."""

    def text(self, preview: Any) -> str:
        """``ebc simulate``'s table (plain text)."""


class HttpCrowd(Protocol):
    """``ebc simulate-http``: the type's simulated crowd through a running server's
    annotator pages (``app.simulate.http.CrowdOverHttp``)."""

    def run_crowd(
        self,
        base_url: str,
        make_session: Any,
        study_id: int,
        secret_key: str,
        view: Any,
        crowd: Any,
        given: dict[str, Any],
        **common: Any,
    ) -> Any:
        """Run it (`given`: the command's options; another type's, given, are refused
        with a ``SimulationError`` that names them); the run's record."""

    def done(self, run: Any, slug: str) -> str:
        """The command's last line, after the run's summary."""


# -- the capabilities a type may lack -------------------------------------------------------


class Diagnostics(Protocol):
    """The diagnostics table of a type that has one (CGD per prefix kind, from people and
    from a reference model)."""

    def compute(self, session: Session, study: Study, query: Any) -> Any:
        """The table (``app.results.schemas.DiagnosticsOut``) for the results' options."""

    def text(self, diag: Any, fmt: str) -> str:
        """The table as ``csv`` or a plain-text ``table`` for the terminal."""

    def recovery(self, session: Session, study: Study, query: Any) -> Any:
        """The self-recovery figures' data (``app.results.schemas.RecoveryOut``)."""


class Planner(Protocol):
    """The power and budget planner of a type that has one."""

    def plan(self, session: Session, study: Study, target: Any, *, seed: int) -> Any:
        """The plan (``StudyPlan``) for `target`, measured on the study's answers so far."""


class Scores(Protocol):
    """Automatic scores a results job computes and stores (a ratings study's EB-M)."""

    label: str
    """What the scores are called ("EB-M")."""
    error: type[Exception]
    """What :meth:`score` raises when the scores cannot be computed (its message says why)."""

    def score(
        self,
        session: Session,
        study: Study,
        *,
        b: int = ...,
        seed: int = 0,
        by: Any,
        dataset: Any = None,
    ) -> None:
        """Compute the study's scores and store them as its current ones (flushes);
        ``dataset``: the study's dataset when the caller has it loaded (the worker)."""

    def computed_at(self, session: Session, study: Study) -> Any:
        """When the current stored scores were computed (None: none yet)."""

    def stored(self, session: Session, study: Study) -> Any:
        """The current stored scores (None: none yet)."""

    def text(self, slug: str, stored: Any, label: str, fmt: str) -> str:
        """The stored scores as ``csv``, ``latex`` or a plain-text ``table``."""


TEMPLATES = (
    "_annotators_head.html",
    "_annotators_row.html",
    "_mturk_preview.html",
    "_progress_cells.html",
    "_progress_head.html",
)
"""The partials every type provides in its ``templates/<name>/``, which the shared pages
include (``plugin(study).template(name)``): the Annotators page's head and row, the MTurk
preview's body, the study page's progress columns. Its results page and annotator pages are
named by its ``dashboard`` and ``pages``; its simulate section by ``preview.TEMPLATE``."""


@dataclass(frozen=True)
class Parts:
    """A type's namespaces: modules of its package, each implementing its protocol."""

    hits: HitRules
    pages: Pages
    """Also its annotator-facing words: ``PREVIEW_TITLE`` (the MTurk preview page's title;
    its body: ``<type>/_mturk_preview.html``), ``CROWD_DESCRIPTION`` and
    ``CROWD_KEYWORDS`` (what a crowd posting says of the work when the researcher says
    nothing else)."""
    results: Results
    dashboard: Dashboard
    """Also ``ANSWERS_LABEL`` and ``ITEMS_LABEL``: what the study page calls its answers and
    its items ("Judgments", "Items")."""
    preview: Preview
    http_crowd: HttpCrowd
    downloads: Any
    """``DOWNLOADS``: the type's own downloads by name (``results.csv``, ``ratings.csv``, ...;
    :class:`DownloadSpec`); ``CATALOGUE``: every download of a study of the type, in the
    order the pages list them, its own and the shared ones (``manifest.json``,
    ``items.csv``, ``items.jsonl``). Its package's folder holds ``templates/<name>/``."""


@dataclass(frozen=True)
class StudyTypePlugin:
    """One study type: what varies between types, behind one interface (the module
    docstring). The registry holds one per ``StudyType``; its functions are called with a
    study of that type only."""

    name: StudyType
    """The ``studies.study_type`` value this plug-in serves (the registry's key)."""
    label: str
    """What people do, as the new-study form offers it."""
    noun: str
    """The type in a sentence: ``f"{slug} is {noun} study"``."""
    parts: Parts
    refusals: Mapping[str, str] = field(default_factory=dict)
    """What the type says of what it does not have, by name (``{slug}`` is the study's):
    a capability (``diagnostics``, ``planner``, ``EB-M``, ``batch``); anything else gets
    ``"{slug} is <noun> study: it has no <what>."``."""
    offline_batch: Callable[..., Any] | None = None
    """How a row of an MTurk-format batch's results file is stored, for a type whose HITs
    fit such a batch (a static template and an input CSV, ``app.crowd.batch``): called as
    ``(session, annotator, public_id, answers, times, now=...)``, it returns the
    submission (``repeated``, ``too_fast``, ``kept``). A next-word HIT fits; a ratings
    HIT, whose quality must be stored before its context is shown, needs the service's
    own pages (None)."""
    diagnostics: Diagnostics | None = None
    planner: Planner | None = None
    scores: Scores | None = None

    # -- its parts, as the callers ask for them ------------------------------------------

    hits = property(lambda self: self.parts.hits)
    pages = property(lambda self: self.parts.pages)
    results = property(lambda self: self.parts.results)
    dashboard = property(lambda self: self.parts.dashboard)
    preview = property(lambda self: self.parts.preview)
    http_crowd = property(lambda self: self.parts.http_crowd)

    @property
    def downloads(self) -> Mapping[str, DownloadSpec]:
        return self.parts.downloads.DOWNLOADS

    @property
    def catalogue(self) -> tuple[str, ...]:
        return self.parts.downloads.CATALOGUE

    @property
    def folder(self) -> Path:
        """The type's package folder: its ``templates/<name>/`` (named ``<name>/...`` by the
        template loader)."""
        return Path(self.parts.downloads.__file__).parent

    @property
    def preview_title(self) -> str:
        return self.parts.pages.PREVIEW_TITLE

    @property
    def crowd_description(self) -> str:
        return self.parts.pages.CROWD_DESCRIPTION

    @property
    def crowd_keywords(self) -> tuple[str, ...]:
        return self.parts.pages.CROWD_KEYWORDS

    @property
    def answers_label(self) -> str:
        return self.parts.dashboard.ANSWERS_LABEL

    @property
    def items_label(self) -> str:
        return self.parts.dashboard.ITEMS_LABEL

    def template(self, name: str) -> str:
        """The loader's name of the type's template `name`."""
        return f"{self.name.value}/{name}"

    def refusal(self, study: Study, what: str) -> str:
        """The message for `what` (a capability, a download) that this type does not have."""
        said = self.refusals.get(what)
        if said is not None:
            return said.format(slug=study.slug)
        return f"{study.slug} is {self.noun} study: it has no {what}."


__all__ = [
    "TEMPLATES",
    "Dashboard",
    "Diagnostics",
    "DownloadSpec",
    "HitRules",
    "HttpCrowd",
    "OptionNotForThisType",
    "Pages",
    "Parts",
    "Planner",
    "Preview",
    "Results",
    "Scores",
    "StudyTypePlugin",
]
