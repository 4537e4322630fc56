"""The results API's models: the options it takes, and the documents it answers with.

A results document (:class:`ResultsOut`) holds the statistics' own dataclasses
(``app.results.stats``: :class:`Quantity`, :class:`ClusterTest`, :class:`StudyPlan`, ...)
as they come, arranged in the paper's table and beside the exclusions and the annotators'
quality. Their numbers are NaN where they cannot be computed, and ``null`` in JSON
(:mod:`app.results.stats.figure`: the one rule). The study documents (summary, detail,
provenance manifest) need no statistics.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app import __version__
from app.results.stats import (
    Agreement,
    ClusterTest,
    Figure,
    PaperFigure,
    PermutationTest,
    PositionBias,
    Quantity,
    Sanity,
    StudyPlan,
    SyntheticCell,
    SyntheticFigure,
)
from app.results.stats.ebc import CiMethod, Estimator, Unit
from app.results.stats.ebm import EBMScores
from app.results.stats.sequential import ANYTIME_LABEL, FIXED_LABEL
from app.studytypes.ratings.schemas import RatingsOut

OnOff = Literal["on", "off"]


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResultQuery(_Out):
    """Options of every result (query parameters of the API, flags of the CLI)."""

    estimator: Estimator = Field("single", description="single (the paper's) or plurality")
    unit: Unit = Field(
        "auto",
        description="unit of the intervals and tests: auto (default: the design decides, "
        "annotator when nested, twoway when items are shared), annotator, twoway "
        "(annotator x item), hit or item (secondary figures)",
    )
    b: int = Field(
        10_000, ge=100, le=200_000, description="bootstrap resamples (wild: draws of weights)"
    )
    ci: CiMethod = Field(
        "wild",
        description="interval method: wild (default; small-cluster corrected: ratios by "
        "the inverted wild cluster bootstrap-t test, CGD and trend by a jackknife t with "
        "G_eff - 1 degrees of freedom), percentile or bca (pairs cluster bootstrap)",
    )
    seed: int = Field(0, ge=0, lt=2**63, description="seed of every resampling")
    exclusions: OnOff = Field(
        "on", description="apply the study's pre-declared exclusions to the main figures"
    )
    level: float = Field(0.95, gt=0.5, lt=1.0, description="interval coverage")


NEXTWORD_OPTIONS = ("estimator", "unit", "ci")


class RatingsQuery(_Out):
    """The options of a ratings study's figures: :class:`ResultQuery`'s without the
    next-word ones (``estimator``, ``unit``, ``ci``), which a ratings study refuses: its
    headline intervals are two-way (annotator x pair), its secondary ones an annotator
    bootstrap."""

    b: int = Field(
        10_000,
        ge=100,
        le=200_000,
        description="resamples of the secondary annotator bootstrap (the agreement's pair "
        "bootstrap takes at most 2,000)",
    )
    seed: int = Field(0, ge=0, lt=2**63, description="seed of every resampling")
    exclusions: OnOff = Field(
        "on", description="apply the study's pre-declared exclusions to the main figures"
    )
    level: float = Field(0.95, gt=0.5, lt=1.0, description="interval coverage")


class LengthRow(_Out):
    """One row of the paper's Table 4: CGD(M|D), CGD(M|M) and EB-C at one length."""

    length: int
    cgd_data: Quantity | None
    cgd_model: Quantity | None
    ebc: Quantity | None
    ratios: list[Quantity] = Field(description="diagnostic kinds over data")
    test: ClusterTest | None = Field(None, description="the headline test of EB-C = 1")
    permutation: PermutationTest | None = Field(description="secondary test (see its label)")
    paper: dict[str, PaperFigure] = Field(
        description="paper-comparable mean ± std over 5 random parts: cgd_data, cgd_model, ebc"
    )


class NoneShareOut(_Out):
    length: int
    kind: str
    share_none: Figure
    n_judgments: int


class ResultSet(_Out):
    """Every figure of one variant (with or without the exclusions)."""

    exclusions_applied: bool
    estimator: Estimator
    unit: Unit = Field(description="the unit the intervals and tests used (auto resolved)")
    ci: str
    b: int
    seed: int | None
    level: float
    design: Literal["nested", "crossed"] = Field(
        "nested", description="the design detected from the judgments (docs/statistics.md)"
    )
    design_reason: str = Field("", description="which design was detected and why, a sentence")
    shared_share: Figure = Field(
        0.0, description="share of the judgments on items that several annotators judged"
    )
    n_judgments: int
    n_items: int
    n_annotators: int
    n_clusters: int
    n_simulated: int = Field(
        0, description="of n_judgments, those from a simulated crowd (simulated annotators)"
    )
    few_annotators: bool = Field(description="some figure has fewer than 30 effective annotators")
    n_effective: Figure = Field(description="effective number of annotators over all judgments")
    interval: str = Field("", description="the interval method, in words")
    warnings: list[str]
    table: list[LengthRow]
    cgd: list[Quantity] = Field(description="every cell (length x kind)")
    ratios: list[Quantity] = Field(
        description="EB-C, diagnostic ratios and EB-C_gap (name ebc_gap) per length"
    )
    trend: Quantity | None = Field(description="slope of ln EB-C per word of prefix length")
    tests: list[ClusterTest] = Field(
        default_factory=list,
        description="headline tests of EB-C = 1 per length, and pooled (length null), by "
        "the intervals' unit (their null and method say which); p_holm: Holm-adjusted over "
        "the lengths; av_low/av_high: the anytime-valid interval",
    )
    secondary_tests: list[ClusterTest] = Field(
        default_factory=list,
        description="secondary: the annotator-only wild tests and intervals, when the "
        "headline unit is another (e.g. two-way in a crossed design)",
    )
    multiplicity: str = Field(
        "", description="with several lengths: which tests are the headline, a sentence"
    )
    anytime_label: str = Field(
        ANYTIME_LABEL, description="the label of the av_low/av_high intervals"
    )
    fixed_label: str = Field(FIXED_LABEL, description="the label of the low/high intervals")

    permutation: list[PermutationTest] = Field(
        description="secondary: within-HIT permutation tests (see their label)"
    )
    paper_label: str
    paper_comparable: list[PaperFigure]
    agreement: Agreement | None
    position_bias: PositionBias
    none_share: list[NoneShareOut]
    sanity: Sanity
    design_effect: Figure = Field(
        description="mean over lengths of (SE / iid SE)^2 (annotator unit only)"
    )


class ExclusionReport(_Out):
    rules: dict[str, Any]
    n_judgments: int
    n_kept: int
    excluded_by_rule: dict[str, int] = Field(
        description="judgments each rule drops (a judgment may fall under several)"
    )
    annotators_excluded: dict[str, list[str]] = Field(
        description="labels of the annotators dropped whole, by rule"
    )


class AnnotatorQualityOut(_Out):
    annotator_id: int
    label: str
    channel: str
    n_judgments: int
    n_hits: int
    median_seconds: Figure
    share_none: Figure
    top1_rate: dict[str, Figure] = Field(description="by prefix kind")
    plurality_agreement: Figure
    attention_accuracy: Figure
    position_chi2: Figure
    position_p: Figure
    reference_rate: Figure = Field(
        description="share of regular judgments choosing the reference model's top-1 "
        "(today the studied model's)"
    )
    reference_expected: Figure = Field(description="the crowd's rate on the same cells")
    assist_p: Figure = Field(description="LLM-assistance test p-value (one-sided)")
    assist_q: Figure = Field(description="its Benjamini-Hochberg adjustment over annotators")
    assisted: bool = Field(
        description="agrees with the reference far beyond the crowd (a flag, not an exclusion)"
    )
    flagged: bool
    reasons: list[str]
    excluded: bool = Field(description="dropped whole by the exclusion rules")


class SyntheticEbcRow(_Out):
    """Synthetic EB-C at one length, one figure per metric (word-level next to token)."""

    length: int
    ebc: dict[str, SyntheticFigure] = Field(description="by metric: tv, js, gd, word_gd")


class SyntheticOut(_Out):
    """Synthetic CGD and EB-C: the reference model P_D in place of people (items.reference).

    Per cell the mean over its items (shown, not attention) of the exact token-level d_TV,
    d_JS (bits) and d_GD between P_M and P_D, and of the word-level d_GD that people are
    asked about; EB-C per length and metric as the ratio of means; item-bootstrap intervals.
    """

    reference_model: str = Field(description="the study's reference model (P_D)")
    item_models: list[str] = Field(description="the reference models the items record")
    methods: list[str] = Field(description="how the worker computed them (items' method)")
    n_items: int = Field(description="shown, non-attention items with divergences")
    n_items_pending: int = Field(description="shown, non-attention items without them yet")
    metrics: list[str]
    metric_labels: dict[str, str]
    b: int
    seed: int | None
    level: float
    interval: str = Field(description="the interval method, in words")
    cells: list[SyntheticCell] = Field(description="every cell (length x kind), all metrics")
    ebc: list[SyntheticEbcRow] = Field(description="EB-C = CGD(model) / CGD(data) per length")
    corruption_ratios: list[SyntheticFigure] = Field(
        description="each corrupted kind's CGD over the kind it corrupts at the same length, per "
        "length and metric (before issue 34: 'gaps')"
    )
    ebc_gap: list[SyntheticFigure] = Field(
        default_factory=list,
        description="EB-C_gap (the later paper's App. A eq. 9): each gap kind's CGD at length l "
        "over CGD(data) at reference_length = l + g, per length and metric",
    )
    warnings: list[str]


def simulated_label(n: int) -> str | None:
    """What every surface of the results says when a simulated crowd's judgments count."""
    if n <= 0:
        return None
    return f"includes {n:,} judgment{'s' if n != 1 else ''} from a simulated crowd"


class EBMOut(_Out):
    """A ratings study's stored EB-M scores (``study_scores``, name "ebm"): computed by a
    results job (``ebc results score``, or the worker when precompute ends), never in a
    request."""

    computed_at: datetime
    provenance: dict[str, Any] = Field(
        description="libraries and versions, seed, B, settings, dataset, counts"
    )
    scores: EBMScores


class ResultsOut(_Out):
    study: str
    kinds: list[str]
    # RatingsQuery first: its fields are a subset of ResultQuery's (extra fields forbidden),
    # so a document read back keeps the options it was written with.
    options: RatingsQuery | ResultQuery = Field(
        description="the options the figures were computed with (a ratings study's: "
        "RatingsQuery, without the next-word estimator, unit and ci)"
    )
    service_version: str
    computed_at: datetime
    seconds: float = Field(description="time spent loading and computing")
    exclusions: ExclusionReport
    results: ResultSet | None = Field(description="main figures (as the exclusions option)")
    other: ResultSet | None = Field(description="the same with the opposite exclusions setting")
    quality: list[AnnotatorQualityOut] = Field(description="per annotator, on all judgments")
    plan: StudyPlan | None
    simulated_judgments: int = Field(
        0,
        description="judgments from a simulated crowd that these figures include (the most "
        "of the two variants); 0: people only. See each variant's n_simulated",
    )
    synthetic: SyntheticOut | None = Field(
        None, description="synthetic CGD and EB-C (null: the study has no reference model)"
    )
    ebm: EBMOut | None = Field(
        None,
        description="ratings studies: the stored EB-M scores (null: none computed yet, or a "
        "next-word study)",
    )
    ratings: RatingsOut | None = Field(
        None,
        description="ratings studies: quality and consistency per length and prefix kind, "
        "with and without exclusions (null: a next-word study). A ratings study has no "
        "judgments: its exclusions count ratings, simulated_judgments its simulated ratings, "
        "and results, other, quality and plan are empty",
    )
    messages: list[str]

    @staticmethod
    def stamp(started: float) -> dict[str, Any]:
        """The fields that say who computed a document, when, and in how many seconds
        since `started` (a ``time.perf_counter()`` value): now, when this is called."""
        return {
            "service_version": __version__,
            "computed_at": datetime.now(UTC),
            "seconds": time.perf_counter() - started,
        }

    @property
    def simulated_label(self) -> str | None:
        return simulated_label(self.simulated_judgments)


class ChannelCostOut(_Out):
    """What one crowd channel charges for a plan, by that platform's own fee rule (no
    platform asked; ``app.simulate.costs.plan_costs``)."""

    channel: str = Field(description="the platform's name (mturk, prolific, local)")
    environment: str = Field(description="the environment the study file sets (sandbox or "
                             "production; sandbox moves no money)")  # fmt: skip
    enabled: bool = Field(description="the study takes people through this channel now")
    assignments: int = Field(description="HIT assignments priced")
    fee_rule: str = Field(description="how the platform charges, in words")
    rewards_cents: int | None = Field(description="the annotators' rewards (null: unpriced)")
    fees_cents: int | None = Field(description="the platform's fees (0: it charges none)")
    total_cents: int | None = Field(description="rewards + fees")
    notes: list[str] = Field(description="what the price depends on (e.g. MTurk's 40% fee)")
    problem: str | None = Field(None, description="why the plan cannot be priced here")


@dataclass(frozen=True)
class PricedPlan(StudyPlan):
    """A plan (:class:`~app.results.stats.StudyPlan`; its ``cost`` uses the study's
    declared ``platform_fee``) with what each crowd channel charges for it
    (``channel_costs``, each platform's own fee rule): ``GET /studies/{slug}/plan`` and
    ``ebc results plan``."""

    channel_costs: list[ChannelCostOut] = field(default_factory=list)

    @classmethod
    def of(cls, plan: StudyPlan, costs: list[ChannelCostOut]) -> PricedPlan:
        return cls(**{f.name: getattr(plan, f.name) for f in fields(StudyPlan)},
                   channel_costs=costs)  # fmt: skip


class DiagnosticRow(_Out):
    """One row of the diagnostics table: CGD of one kind at one length from one source, and
    its ratio to a reference cell: a corrupted kind's corruption ratio over the uncorrupted
    kind at the same length, a gap kind's EB-C_gap over data at l + g (see
    ``ratio_definitions``). Before issue 34 the corruption ratio's fields were ``gap*``."""

    source: str = Field(description="people, or synthetic:<metric> (tv, js, gd, word_gd)")
    kind: str
    base_kind: str = Field(description="the kind without its corruption rate and gap")
    c: float | None = Field(description="corruption rate (corrupted kinds), else null")
    l_gap: int | None = Field(
        None, description="gap kinds: the model's words after the distorted prefix, else null"
    )
    paper_label: str | None = Field(
        description="translation: the first paper's forced prefix (DATA, NORMAL, UNREL, RAND)"
    )
    length: int
    cgd: Figure
    cgd_se: Figure
    cgd_low: Figure
    cgd_high: Figure
    method: str = Field(description="the CGD interval's method")
    ratio_name: Literal["corruption_ratio", "ebc_gap"] | None = Field(
        None, description="corrupted kinds: corruption_ratio; gap kinds: ebc_gap; else null"
    )
    ratio_reference: str | None = Field(
        None, description="the kind the ratio is over (data or model), else null"
    )
    ratio_reference_length: int | None = Field(
        None, description="the length of the ratio's reference cell (l, or l + g for EB-C_gap)"
    )
    ratio: Figure = Field(description="CGD(kind, l) / CGD(ratio_reference, ratio_reference_length)")
    ratio_se: Figure
    ratio_low: Figure
    ratio_high: Figure
    ratio_p_value: Figure = Field(
        description="people: test of ratio = 1 (wild cluster bootstrap by annotator)"
    )
    n: int = Field(description="what enters the CGD, counted in n_unit")
    n_unit: Literal["judgments", "items"]
    n_annotators: int | None = Field(description="people: annotators in the cell")
    n_effective: Figure = Field(description="people: effective number of annotators")
    few_annotators: bool | None
    n_simulated: int = Field(
        0, description="people: of the cell's n judgments, those from a simulated crowd"
    )
    simulated: str | None = Field(
        None,
        description="people: 'includes N judgments from a simulated crowd' when some are; "
        "null: people only (and every synthetic row)",
    )


class DiagnosticsOut(_Out):
    """The papers' diagnostic curves: CGD per kind against prefix length, from people and
    from the reference model, with the corruption ratios and EB-C_gap (see
    ``ratio_definitions``)."""

    study: str
    task: str
    kinds: list[str] = Field(description="the study's prefix kinds")
    shown: bool = Field(description="the study has diagnostic kinds or a reference model")
    reference_model: str | None
    options: ResultQuery
    exclusions_applied: bool | None = Field(description="people rows: exclusions applied")
    people_interval: str = Field(description="the people rows' interval method, in words")
    synthetic_interval: str
    ratio_definitions: dict[str, str] = Field(
        description="corruption_ratio and ebc_gap, in words (before issue 34: gap_definition)"
    )
    paper_labels: dict[str, str] = Field(description="kind -> the first paper's label")
    n_simulated: int = Field(
        0, description="of the judgments in the people rows, those from a simulated crowd"
    )
    rows: list[DiagnosticRow]
    messages: list[str]


class CountsOut(_Out):
    items: int
    attention_items: int
    skipped_items: int
    hits: int
    assignments_submitted: int
    judgments: int
    annotators: int


class StudySummaryOut(_Out):
    slug: str
    title: str
    task: str
    status: str
    model: str
    prefix_lengths: list[int]
    kinds: list[str]
    created_at: datetime


class StudyDetailOut(StudySummaryOut):
    description: str
    config: dict[str, Any] = Field(description="the study file (see StudyConfig)")
    counts: CountsOut


class SoftwareOut(_Out):
    """The software that made something (app.software): None where unknown or absent."""

    python: str
    ebc_judge: str
    git_revision: str | None = Field(description="HEAD of the git checkout, if run from one")
    git_dirty: bool | None = Field(description="the checkout had uncommitted changes")
    packages: dict[str, str | None] = Field(description="installed versions (None: absent)")


class ManifestOut(_Out):
    """What a published figure was computed from."""

    study: str
    title: str
    task: str
    service: str
    service_version: str
    generated_at: datetime
    model: dict[str, Any]
    tokenizer: str | None
    dataset: dict[str, Any]
    seeds: dict[str, Any]
    decoding: dict[str, Any]
    config: dict[str, Any]
    counts: CountsOut
    item_provenance: dict[str, Any] = Field(description="provenance of one item per kind")
    results_defaults: ResultQuery
    software: SoftwareOut = Field(description="the software that computed these figures")
    precompute_software: list[SoftwareOut] = Field(
        default_factory=list,
        description="the software the worker made the items with, as recorded in the "
        "provenance of the first item of each kind (items made before it was recorded: none)",
    )


class GapPoint(_Out):
    """One point of the self-recovery figure (the later paper's Fig. 3): EB-C_gap of a gap
    kind at prefix length l after l_gap words the model wrote itself."""

    source: str = Field(description="people, or synthetic:<metric>")
    kind: str = Field(description="the gap kind, e.g. data_corrupted@0.3+gap@5")
    distorted_kind: str = Field(description="its prefix of l words: data_shuffled, ...")
    c: float | None
    length: int = Field(description="l: the distorted prefix's words")
    l_gap: int
    reference_length: int = Field(description="l + l_gap: the data cell it is over")
    ebc_gap: Figure
    low: Figure
    high: Figure
    p_value: Figure = Field(description="people: test of EB-C_gap = 1; synthetic: null")


class CorruptionPoint(_Out):
    """One point of CGD against the corruption rate (the first paper's Fig. 3): a corrupted
    kind's CGD at length l beside the uncorrupted kinds' CGD(M|D) and CGD(M|M)."""

    source: str
    kind: str = Field(description="data_corrupted@c or model_corrupted@c")
    corrupts: str = Field(description="the kind it corrupts: data or model")
    c: float
    length: int
    cgd: Figure
    low: Figure
    high: Figure
    cgd_data: Figure = Field(description="CGD(M|D) at the same length and source")
    cgd_model: Figure = Field(description="CGD(M|M) at the same length and source")


class RecoveryOut(_Out):
    """The papers' self-recovery figures as data: EB-C_gap against l_gap (lines per l) and
    CGD against the corruption rate (lines per l), from people and from the reference model,
    taken from the diagnostics table (the same estimates and intervals)."""

    study: str
    options: ResultQuery
    intervals: dict[str, str] = Field(
        description="per source: the estimator and interval its figures carry, in words"
    )
    gap_curve: list[GapPoint]
    corruption_curve: list[CorruptionPoint]
    reference_values: list[dict[str, Any]] = Field(
        description="the papers' published values drawn as a dashed line (empty: none cited)"
    )
    reference_note: str
    n_simulated: int = 0
    messages: list[str]


class ForcedSampleOut(_Out):
    """One forced-prefix sample (`app.results.samples.Sample`)."""

    kind: str
    label: str | None = Field(description="the first paper's name: DATA, NORMAL, UNREL, RAND")
    length: int
    index: int
    source: str | None
    prompt: str
    prefix: str = Field(description="the forced prefix (underlined in the tables)")
    continuation: str = Field(description="what the model wrote after it")
    reference: str | None
    bleu: float | None = Field(description="sentence BLEU (DATA and NORMAL only)")


class SampleBleuOut(_Out):
    length: int
    kind: str
    n: int
    bleu: float = Field(description="sacrebleu's corpus BLEU of the cell, 0-100")


class ForcedSamplesOut(_Out):
    """A study's forced-prefix samples (issue 34; the first paper's Tables 1, 5, 8, 9)."""

    study: str
    per_kind: int = Field(description="samples asked per kind and length; 0: none")
    lengths: list[int]
    kinds: list[str]
    made: int
    skipped: int = Field(description="samples the worker skipped (e.g. a beam too short)")
    error: str | None = Field(description="why the worker could not make them, if it could not")
    bleu: list[SampleBleuOut]
    bleu_note: str
    samples: list[ForcedSampleOut]
