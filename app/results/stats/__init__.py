"""Pure, seeded statistics of an EB-C study: numpy arrays in, numbers out.

No database, no web: ``app/results/queries.py`` loads the judgment columns and the
service calls these functions. See docs/design.md §1 ("Estimators and error bars"). Their
result dataclasses are what the API writes, as they are; a number that cannot be computed
is NaN here and null there (:mod:`.figure`).
"""

from .agreement import (
    Agreement,
    AgreementStat,
    agreement,
    category_counts,
    fleiss_kappa,
    gwet_ac1,
    krippendorff_alpha_nominal,
    percent_agreement,
)
from .bootstrap import bca_interval, percentile_interval, resample_cluster_totals, resample_sums
from .cluster import WildRatio, effective_clusters, jackknife_t, wild_ratio
from .columns import DATA_KIND, MODEL_KIND, Kind
from .ebc import (
    FEW_ANNOTATORS,
    INTERVAL_LABELS,
    TEST_METHOD,
    TEST_NULL,
    ClusterTest,
    EBCResults,
    Quantity,
    estimate_ebc,
    plurality_by_item,
)
from .figure import Figure, finite_or_none, jsonable, missing
from .paper import PAPER_LABEL, PaperFigure, ebc_ratio, paper_comparable
from .permutation import PERMUTATION_LABEL, PermutationTest, permutation_test
from .power import (
    PAPER_CGD_DATA,
    PlanError,
    PlanTarget,
    StudyPlan,
    design_effect,
    judgments_for_halfwidth,
    judgments_per_cell,
    plan_study,
    power_at,
    smallest_detectable_ebc,
)
from .quality import (
    AnnotatorQuality,
    PositionBias,
    Sanity,
    annotator_quality,
    is_none,
    none_share_by_cell,
    position_bias,
    position_chi2,
    robust_z,
    sanity,
)
from .synthetic import (
    METRIC_LABELS,
    METRICS,
    SYNTHETIC_INTERVAL,
    SyntheticCell,
    SyntheticFigure,
    SyntheticTable,
    synthetic_table,
)

__all__ = [
    "DATA_KIND",
    "FEW_ANNOTATORS",
    "INTERVAL_LABELS",
    "METRICS",
    "METRIC_LABELS",
    "MODEL_KIND",
    "PAPER_CGD_DATA",
    "PAPER_LABEL",
    "PERMUTATION_LABEL",
    "SYNTHETIC_INTERVAL",
    "TEST_METHOD",
    "TEST_NULL",
    "Agreement",
    "AgreementStat",
    "AnnotatorQuality",
    "ClusterTest",
    "EBCResults",
    "Figure",
    "Kind",
    "PaperFigure",
    "PermutationTest",
    "PlanError",
    "PlanTarget",
    "PositionBias",
    "Quantity",
    "Sanity",
    "StudyPlan",
    "SyntheticCell",
    "SyntheticFigure",
    "SyntheticTable",
    "WildRatio",
    "agreement",
    "annotator_quality",
    "bca_interval",
    "category_counts",
    "design_effect",
    "ebc_ratio",
    "effective_clusters",
    "estimate_ebc",
    "finite_or_none",
    "fleiss_kappa",
    "gwet_ac1",
    "is_none",
    "jackknife_t",
    "jsonable",
    "judgments_for_halfwidth",
    "judgments_per_cell",
    "krippendorff_alpha_nominal",
    "missing",
    "none_share_by_cell",
    "paper_comparable",
    "percent_agreement",
    "percentile_interval",
    "permutation_test",
    "plan_study",
    "plurality_by_item",
    "position_bias",
    "position_chi2",
    "power_at",
    "resample_cluster_totals",
    "resample_sums",
    "robust_z",
    "sanity",
    "smallest_detectable_ebc",
    "synthetic_table",
    "wild_ratio",
]
