"""Response models of the results API (and the CLI's JSON output).

Every number that can be undefined (an empty cell, a ratio with a zero denominator, a
figure without data) is ``null``, never NaN, so the JSON is valid everywhere.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.results.stats.ebc import PERMUTATION_LABEL

Estimator = Literal["single", "plurality"]
Unit = Literal["annotator", "twoway", "hit", "item"]
CiMethod = Literal["wild", "percentile", "bca"]
OnOff = Literal["on", "off"]


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResultQuery(_Out):
    """Options of every result (query parameters of the API, flags of the CLI)."""

    estimator: Estimator = Field("single", description="single (the paper's) or plurality")
    unit: Unit = Field(
        "annotator",
        description="resampling unit: annotator (default, nested designs), twoway "
        "(Cameron-Gelbach-Miller, crossed designs), hit or item (secondary figures)",
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


class QuantityOut(_Out):
    """One figure with its uncertainty (see ``app.results.stats.Quantity``)."""

    name: Literal["cgd", "ebc", "ratio", "trend"]
    length: int | None
    kind: str | None
    reference_kind: str | None
    estimate: float | None
    se: float | None
    low: float | None
    high: float | None
    method: str
    level: float
    delta_se: float | None = Field(description="cluster-robust delta method on the log scale")
    delta_low: float | None
    delta_high: float | None
    iid_se: float | None = Field(description="standard error that ignores clustering")
    design_effect: float | None
    n_judgments: int
    n_items: int
    n_annotators: int
    n_clusters: int
    few_annotators: bool = Field(
        description="fewer than 30 effective annotators (n_effective) enter this figure"
    )
    n_effective: float | None = Field(
        None,
        description="effective number of annotators, (sum n_g)^2 / sum n_g^2 over the "
        "judgments n_g of each annotator in this figure (Kish)",
    )
    p_value: float | None = Field(
        None,
        description="ratios: wild cluster bootstrap test of ratio = 1 with annotators as "
        "the sampled unit; trend (interval wild): jackknife t test of slope = 0",
    )


class ClusterTestOut(_Out):
    """The headline test of EB-C = 1 at one length (``length`` null: pooled)."""

    length: int | None = Field(description="null: all lengths pooled")
    estimate: float | None = Field(description="EB-C")
    statistic: float | None = Field(description="cluster-robust t of CGD(model) - CGD(data)")
    p_value: float | None = Field(description="two-sided")
    p_greater: float | None = Field(description="one-sided, H1: EB-C > 1")
    low: float | None = Field(description="the test inverted: EB-C values it does not reject")
    high: float | None
    level: float
    b: int = Field(description="bootstrap draws")
    n_annotators: int
    n_effective: float | None
    few_annotators: bool
    null: str = Field(description="the null hypothesis, in words")
    method: str


class PermutationOut(_Out):
    length: int | None = Field(description="null: all lengths pooled")
    statistic: float | None = Field(description="ln EB-C")
    ebc: float | None
    p_value: float = Field(
        description="two-sided, within-HIT label shuffles (secondary: see label)"
    )
    p_greater: float = Field(description="one-sided, H1: EB-C > 1")
    n_permutations: int
    n_hits: int
    n_items: int
    label: str = Field(PERMUTATION_LABEL, description="what this test is (and is not)")


class PaperFigureOut(_Out):
    label: str
    name: Literal["cgd", "ebc"]
    length: int
    kind: str | None
    mean: float | None
    std: float | None
    parts: list[float | None]


class LengthRow(_Out):
    """One row of the paper's Table 4: CGD(M|D), CGD(M|M) and EB-C at one length."""

    length: int
    cgd_data: QuantityOut | None
    cgd_model: QuantityOut | None
    ebc: QuantityOut | None
    ratios: list[QuantityOut] = Field(description="diagnostic kinds over data")
    test: ClusterTestOut | None = Field(None, description="the headline test of EB-C = 1")
    permutation: PermutationOut | None = Field(description="secondary test (see its label)")
    paper: dict[str, PaperFigureOut] = Field(
        description="paper-comparable mean ± std over 5 random parts: cgd_data, cgd_model, ebc"
    )


class AgreementStatOut(_Out):
    name: str
    estimate: float | None
    se: float | None
    low: float | None
    high: float | None
    level: float


class AgreementOut(_Out):
    """Agreement on the model rank of the chosen word, over items with >= 2 judgments."""

    krippendorff_alpha: AgreementStatOut
    fleiss_kappa: AgreementStatOut | None
    percent_agreement: AgreementStatOut
    gwet_ac1: AgreementStatOut
    n_items: int
    n_judgments: int
    min_judgments_per_item: int
    max_judgments_per_item: int
    n_categories: int
    b: int
    seed: int | None


class PositionBiasOut(_Out):
    counts: list[int] = Field(description="word choices by screen slot")
    rates: list[float | None]
    share_none: float | None
    chi2: float | None
    p_value: float | None


class NoneShareOut(_Out):
    length: int
    kind: str
    share_none: float | None
    n_judgments: int


class SanityOut(_Out):
    n_items: int
    top1_is_true: float | None = Field(description="data items whose model top-1 is true")
    true_shown: float | None = Field(description="data items whose true next word is shown")
    people_pick_true: float | None = Field(description="when shown, judgments choosing it")
    people_pick_top1_when_true: float | None
    n_judgments_true_shown: int


class ResultSet(_Out):
    """Every figure of one variant (with or without the exclusions)."""

    exclusions_applied: bool
    estimator: Estimator
    unit: Unit
    ci: str
    b: int
    seed: int | None
    level: float
    n_judgments: int
    n_items: int
    n_annotators: int
    n_clusters: int
    few_annotators: bool = Field(description="some figure has fewer than 30 effective annotators")
    n_effective: float | None = Field(
        None, description="effective number of annotators over all judgments"
    )
    interval: str = Field("", description="the interval method, in words")
    warnings: list[str]
    table: list[LengthRow]
    cgd: list[QuantityOut] = Field(description="every cell (length x kind)")
    ratios: list[QuantityOut] = Field(description="EB-C and diagnostic ratios per length")
    trend: QuantityOut | None = Field(description="slope of ln EB-C per word of prefix length")
    tests: list[ClusterTestOut] = Field(
        default_factory=list,
        description="headline tests of EB-C = 1 per length, and pooled (length null); "
        "null: population EB-C = 1, annotators as the sampled unit",
    )
    permutation: list[PermutationOut] = Field(
        description="secondary: within-HIT permutation tests (see their label)"
    )
    paper_label: str
    paper_comparable: list[PaperFigureOut]
    agreement: AgreementOut | None
    position_bias: PositionBiasOut
    none_share: list[NoneShareOut]
    sanity: SanityOut
    design_effect: float | None = Field(description="mean over lengths of (SE / iid SE)^2")


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
    median_seconds: float | None
    share_none: float | None
    top1_rate: dict[str, float | None] = Field(description="by prefix kind")
    plurality_agreement: float | None
    attention_accuracy: float | None
    position_chi2: float | None
    position_p: float | None
    flagged: bool
    reasons: list[str]
    excluded: bool = Field(description="dropped whole by the exclusion rules")


class PlanOut(_Out):
    """Judgments, HITs, annotators and cost for a target (DESIGN.md's power formula)."""

    target_ebc: float | None
    halfwidth: float | None
    cgd_data: float = Field(description="CGD(data) assumed (measured when there is data)")
    cgd_data_measured: bool
    alpha: float
    power_target: float
    design_effect: float = Field(description="measured by annotator bootstrap, else 1")
    design_effect_measured: bool
    judgments_per_cell_iid: int
    judgments_per_cell: int
    power: float | None = Field(description="power of the plan")
    hits_per_length: int
    hits: int
    assignments: int
    judgments: int
    annotators_needed: int
    cost: float = Field(description="in the currency of reward_cents / 100, fee included")
    judgments_per_cell_now: int = Field(description="smallest data/model cell so far")
    power_now: float | None
    smallest_detectable_ebc_now: float | None
    assumptions: str


class ResultsOut(_Out):
    study: str
    kinds: list[str]
    options: ResultQuery
    service_version: str
    computed_at: datetime
    seconds: float = Field(description="time spent loading and computing")
    exclusions: ExclusionReport
    results: ResultSet | None = Field(description="main figures (as the exclusions option)")
    other: ResultSet | None = Field(description="the same with the opposite exclusions setting")
    quality: list[AnnotatorQualityOut] = Field(description="per annotator, on all judgments")
    plan: PlanOut | None
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
