"""What a study type provides: the interface of a plug-in of `app.studytypes.registry`.

A study type is what people do in a study (``StudyType``: pick the next word, rate
continuations) and everything that follows from it: the items the worker makes and how they
go into HITs, the annotator's page and what a submission stores, the results document and
its downloads, the simulations and the dashboard's pages. Each type is one package under
``app/studytypes/`` whose ``plugin.py`` subclasses :class:`StudyTypePlugin`; the rest of the
code asks the registry (``STUDY_TYPES[study.study_type]``) and the type's declared
capabilities, never a type's name.

Capabilities a type may lack are ``None`` (a figure, a page section, a CLI command): the
callers say so with the type's own message (:meth:`StudyTypePlugin.refusal`), as a 404 on
the web (:class:`NotForThisType`). Options of the results that a type does not take are
refused, never ignored (:class:`OptionNotForThisType`, a 422 that names them).

What a type's code shares with the other types' is public in the shared modules
(``app.results.queries``, ``app.results.exports``, ``app.annotation.*``,
``app.simulate.*``), never a private name of another module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from sqlalchemy.orm import Session

from app.models import Study, StudyType
from app.validation import BadInput


class NotForThisType(LookupError):
    """Something a study's type does not have (a figure, a download, a command): a 404 on
    the web, as a download that does not exist; `message` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


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


class Diagnostics(Protocol):
    """The diagnostics table of a type that has one (CGD per prefix kind, from people and
    from a reference model)."""

    def compute(self, session: Session, study: Study, query: Any) -> Any:
        """The table (``app.results.schemas.DiagnosticsOut``) for the results' options."""

    def text(self, diag: Any, fmt: str) -> str:
        """The table as ``csv`` or a plain-text ``table`` for the terminal."""


class Planner(Protocol):
    """The power and budget planner of a type that has one."""

    def plan(self, session: Session, study: Study, target: Any, *, seed: int) -> Any:
        """The plan (``StudyPlan``) for `target`, measured on the study's answers so far."""


class Scores(Protocol):
    """Automatic scores a results job computes and stores (a ratings study's EB-M)."""

    error: type[Exception]
    """What :meth:`score` raises when the scores cannot be computed (its message says why)."""

    def score(self, session: Session, study: Study, *, b: int, seed: int, by: Any) -> None:
        """Compute the study's scores and store them as its current ones (flushes)."""

    def stored(self, session: Session, study: Study) -> Any:
        """The current stored scores (None: none yet)."""

    def text(self, slug: str, stored: Any, label: str, fmt: str) -> str:
        """The stored scores as ``csv``, ``latex`` or a plain-text ``table``."""


class Preview(Protocol):
    """ "Simulate before you pay": the type's simulated crowd on a study's design, R times,
    through the type's results (the study page's section, its own page and
    ``ebc simulate``)."""

    options: type[Any]
    """Its options (a pydantic model: the form's fields and the CLI's flags)."""
    template: str
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

    def run(
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


class StudyTypePlugin(ABC):
    """One study type: what varies between types, behind one interface.

    Subclasses set the class attributes and implement the methods; the registry holds one
    instance per ``StudyType``. The methods are called with a study of this type only.
    """

    name: ClassVar[StudyType]
    """The ``studies.study_type`` value this plug-in serves (the registry's key)."""
    label: ClassVar[str]
    """What people do, as the new-study form offers it."""
    noun: ClassVar[str]
    """The type in a sentence: ``f"{slug} is {noun} study"``."""
    preview_title: ClassVar[str]
    """The title of the MTurk preview page (its body: the ``_mturk_preview.html`` template)."""
    answers_label: ClassVar[str]
    items_label: ClassVar[str]
    """What the study page calls its answers and its items ("Judgments", "Items")."""
    offline_batch: ClassVar[bool]
    """Whether its HITs fit an MTurk-format batch (a static template and an input CSV,
    ``app.crowd.batch``): a next-word HIT does; a ratings HIT, whose quality must be
    stored before its context is shown, needs the service's own pages."""
    crowd_description: ClassVar[str]
    crowd_keywords: ClassVar[tuple[str, ...]]
    """What a crowd posting says of the work when the researcher says nothing else."""

    # -- where its templates and static files live -----------------------------------------

    @property
    def folder(self) -> Path:
        """The type's package folder: its ``templates/<name>/`` (named ``<name>/...`` by the
        template loader) and ``static/`` (served under ``/static``)."""
        import sys

        return Path(sys.modules[type(self).__module__].__file__).parent

    def template(self, name: str) -> str:
        """The loader's name of the type's template `name`."""
        return f"{self.name.value}/{name}"

    # -- precompute ------------------------------------------------------------------------

    def words_after_prefix(self, study: Study) -> int:
        """Words a data prefix's dataset line must hold after it (by default the true next
        word: 1)."""
        return 1

    # -- HITs ------------------------------------------------------------------------------

    def placeable(self, query: Any) -> Any:
        """`query` of a study's unplaced, shown items narrowed to those that may go into a
        HIT (by default: all of them)."""
        return query

    @abstractmethod
    def attention_ready(self, row: Any, min_prob: float) -> bool:
        """Whether an item (a row with ``is_attention``, ``choices``, ``true_next_word``,
        ``provenance``) may be one of a HIT's attention items."""

    @abstractmethod
    def screen_order(self, screen: list[int]) -> list:
        """A position's stored screen order from its shuffled choices' ranks."""

    @abstractmethod
    def load_attention_items(
        self, session: Session, study: Study, rows: Iterable[Mapping[str, object]]
    ) -> int:
        """Add a researcher's attention file (``ebc hits build --attention``); how many
        items; ``HitBuildError`` where the type takes none."""

    # -- collection ------------------------------------------------------------------------

    @abstractmethod
    def answers_per_cell(self, session: Session, items: Any) -> Mapping[tuple[int, str], tuple]:
        """Per (length, kind) of the items matching `items` (a condition on ``Item``), the
        answers they got and, for a type whose answers come in steps, how many are complete
        (else None): ``(n, n_complete)``, for every cell (``(0, ...)`` where none)."""

    # -- the annotator's page -------------------------------------------------------------

    @abstractmethod
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

    @abstractmethod
    def send(self, session: Session, annotator: Any, form: Mapping[str, str]) -> Any:
        """Store a posted page (``app.annotation.schemas.Sent``), or refuse it with an
        ``app.annotation.errors.FormRefused`` (its page is shown again). Call with the
        annotator locked."""

    @abstractmethod
    def mturk_fields(self, session: Session, assignment: Any) -> list[tuple[str, str]]:
        """What the MTurk done page posts on to MTurk so that its copy (the answer XML)
        can restore ours: form fields of positions and what was chosen, never a rank or a
        kind."""

    @abstractmethod
    def store_copy(
        self, session: Session, study: Study, annotator: Any, lease: Any, copy: Any, when: Any
    ) -> None:
        """Store a copy of a HIT's answers that reached a platform but not us
        (``app.crowd.recovery.RecoveredSubmission``), as of `when`, by the rules of a live
        submission; refuse one that does not fit (``AnnotationError``)."""

    # -- results ---------------------------------------------------------------------------

    @abstractmethod
    def results_document(
        self, session: Session, study: Study, query: Any, *, started: float | None = None
    ) -> Any:
        """The study's results document (``app.results.schemas.ResultsOut``) for the
        results' options `query` (a ``ResultQuery``; options the type does not take raise
        :class:`OptionNotForThisType`). Reads; never commits."""

    downloads: ClassVar[Mapping[str, DownloadSpec]]
    """The type's own downloads by name (``results.csv``, ``ratings.csv``, ...)."""
    catalogue: ClassVar[tuple[str, ...]]
    """Every download of a study of this type, in the order the pages list them: its own
    and the shared ones (``manifest.json``, ``items.csv``, ``items.jsonl``)."""

    @abstractmethod
    def results_text(self, res: Any, fmt: str, label: str, *, paper: bool) -> str:
        """``ebc results STUDY -f FMT``: the document as ``csv``, ``latex`` (`label`: the
        table's row label; `paper`: the paper-comparable mean +- std) or a plain-text
        ``table`` for the terminal (``json`` is the document itself, for every type)."""

    @abstractmethod
    def results_page(self, session: Session, study: Study, options: Any) -> tuple[str, dict]:
        """The dashboard's results page: its template and context, from the page's options
        (``results_query()``: the results' options; ``target()``: the planner's)."""

    def check_options(self, query: Any) -> None:
        """Refuse results' options given that this type does not take
        (:class:`OptionNotForThisType`); by default it takes them all."""
        return None

    # -- simulations -----------------------------------------------------------------------

    preview: ClassVar[Preview]
    http_crowd: ClassVar[HttpCrowd]

    diagnostics: ClassVar[Diagnostics | None] = None
    planner: ClassVar[Planner | None] = None
    scores: ClassVar[Scores | None] = None

    @abstractmethod
    def annotator_quality(self, session: Session, study: Study) -> dict[int, Any]:
        """Per annotator id, the quality figures of the Annotators page (no error bars)."""

    def annotators_context(self, study: Study) -> dict[str, Any]:
        """What the type's partials of the Annotators page read besides ``quality``
        (``_annotators_head.html``, ``_annotators_row.html``)."""
        return {}

    @abstractmethod
    def answers(self, session: Session, study: Study) -> Any:
        """The study's counted answers (judgments, ratings) as the columns the exclusion
        rules read (``app.results.exclusions.Answers``)."""

    def refusal(self, study: Study, what: str) -> str:
        """The message for `what` (a figure, a download) that this type does not have."""
        return f"{study.slug} is {self.noun} study: it has no {what}."
