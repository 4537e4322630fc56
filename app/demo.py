"""The embedded demo: a study and an admin account on the default SQLite file, its attention
items, and (`ebc demo --simulated-crowd`) a simulated crowd through the real pages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.auth.service import create_user, generate_password, set_password
from app.hits.service import load_attention_items
from app.models import Annotator, Item, Study, User
from app.studies.schemas import DatasetSection, ModelSection, StudyConfig
from app.studies.service import create_study, get_study

DEMO_SLUG = "demo-austen"
DEMO_USER = "admin"


@dataclass(frozen=True)
class SeededDemo:
    study: Study
    username: str
    password: str


# The demo's size (issue 32: the demo shows what the service is for). 300 items per cell
# make 60 HITs per length; the simulated crowd below, most doing one HIT, leaves an EB-C
# table with about 48 effective annotators per length (5th percentile 42 in 200 simulated
# arrivals): intervals a reader can read, not a pilot's [0.7, 5.4e7]. The cap lets the
# newcomer do every HIT the crowd leaves them (`DEMO_LEFT`).
DEMO_ITEMS_PER_CELL = 300
DEMO_CAP = 5
DEMO_LEFT = 5


def demo_config(
    model_dir: Path, dataset: Path, *, items_per_cell: int = DEMO_ITEMS_PER_CELL
) -> StudyConfig:
    return StudyConfig(
        slug=DEMO_SLUG,
        title="Demo: a small word-level LM on Jane Austen",
        description="Two prefix lengths, data and model prefixes, a simulated crowd.",
        model=ModelSection(name=str(model_dir)),
        dataset=DatasetSection(path=str(dataset)),
        prefix_lengths=[10, 20],
        kinds=["data", "model"],
        items_per_cell=items_per_cell,
        seed=20261122,
        annotators={"min_seconds_per_item": 0.5, "per_annotator_cap": DEMO_CAP},
    )


def seed_demo(session: Session, config: StudyConfig) -> SeededDemo:
    """Create the demo study if missing and give the admin a fresh password.

    The password is new on every run so the console always shows one that works.
    """
    study = get_study(session, config.slug) or create_study(session, config)
    password = generate_password()
    user = session.scalar(select(User).where(User.username == DEMO_USER))
    if user is None:
        create_user(session, DEMO_USER, password, is_admin=True)
    else:
        set_password(session, user, password)
    return SeededDemo(study, DEMO_USER, password)


def _row(words: str, answer: str, distractors: str) -> dict[str, object]:
    return {"words": words, "answer": answer, "distractors": distractors.split()}


# The demo study's attention items (docs/design.md: about one per HIT, the same for both kinds),
# a researcher's attention file (`ebc hits attention`, app.hits.service.load_attention_items)
# written in the demo's tokenisation (lower case, punctuation split off). The demo model,
# small and trained for minutes, hardly ever predicts a held-out line's next word with
# p >= 0.9, so build_hits finds no attention items among its data prefixes (0 of 32
# candidates on the Austen build): eight per prefix length, enough for one in every HIT.
DEMO_ATTENTION = [
    _row(
        "it is a truth universally acknowledged , that a single", "man", "letter walk sister bonnet"
    ),
    _row("one , two , three , four , five ,", "six", "ball tea she garden"),
    _row(
        "monday , tuesday , wednesday , thursday , friday ,", "saturday", "letter carriage happy mr"
    ),
    _row("january , february , march , april , may ,", "june", "cousin quite dinner was"),
    _row("a , b , c , d , e ,", "f", "lady horse and evening"),
    _row("the first , the second , the third , the", "fourth", "park aunt morning very"),
    _row("ten , nine , eight , seven , six ,", "five", "fortune miss party said"),
    _row("two , four , six , eight , ten ,", "twelve", "room heart then colonel"),
    _row(
        "one , two , three , four , five , six , seven , eight , nine , ten ,",
        "eleven",
        "bath her letter kind",
    ),
    _row(
        "sunday , monday , tuesday , wednesday , thursday , friday , saturday , sunday , "
        "monday , tuesday ,",
        "wednesday",
        "elinor house not ball",
    ),
    _row(
        "january , february , march , april , may , june , july , august , september , october ,",
        "november",
        "brother said music he",
    ),
    _row("a , b , c , d , e , f , g , h , i , j ,", "k", "garden mother could visit"),
    _row(
        "the first , the second , the third , the fourth , the fifth , the sixth , and the",
        "seventh",
        "letter family would rain",
    ),
    _row(
        "it is a truth universally acknowledged , that a single man in possession of a good "
        "fortune , must be",
        "in",
        "quite dancing sister the",
    ),
    _row("z , y , x , w , v , u , t , s , r , q ,", "p", "evening dear had journey"),
    _row(
        "spring , summer , autumn , winter , spring , summer , autumn , winter , spring , summer ,",
        "autumn",
        "money emma at happy",
    ),
]


def add_demo_attention(session: Session, study: Study) -> int:
    """The demo's attention items, once, before its HITs are built; how many were added."""
    have = session.scalar(
        select(func.count(Item.id)).where(Item.study_id == study.id, Item.kind == "attention")
    )
    return 0 if have else load_attention_items(session, study, DEMO_ATTENTION)


# The demo's simulated crowd: a stand-in P_D with this population EB-C (sampler behaviour,
# CGD(data) 0.73, the heterogeneity of app.simulate.crowd), so the newcomer's first results
# page shows an EB-C table, intervals and a plot, labelled as simulated. Its activity is
# light: ceil(0.5 (1 + Pareto(3))) HITs, one for 7 annotators in 8, so the work spreads
# over many annotators (the effective number the intervals rest on).
DEMO_TRUE_EBC = 1.1
DEMO_CROWD = "sampler"
DEMO_ACTIVITY = {"activity_min": 0.5, "activity_tail": 3.0}


def demo_crowd_due(make_session: Callable[[], Session], study_id: int) -> bool:
    """Whether the demo's simulated crowd has work: the study has no simulated annotators
    yet and at least two open assignments (`ebc demo` starts no server otherwise)."""
    from app.simulate.godview import GodView

    with make_session() as session:
        done_before = session.scalar(
            select(func.count(Annotator.id)).where(
                Annotator.study_id == study_id, Annotator.simulated.is_(True)
            )
        )
    return not done_before and GodView(make_session, study_id).open_slots() >= 2


def run_demo_crowd(
    base_url: str,
    make_session: Callable[[], Session],
    study_id: int,
    secret_key: str,
    *,
    seed: int = 0,
):
    """The demo's simulated crowd over HTTP (a next-word study's: the demo study is one) on
    the study's open assignments but `DEMO_LEFT` (at most half of them), so the newcomer's
    annotator link still has several HITs. None when the study has simulated annotators
    already (a second run of the demo leaves what the first one did)."""
    from app.simulate.crowd import Crowd, Heterogeneity
    from app.simulate.godview import GodView
    from app.studytypes.nextword.http_crowd import run_http_crowd
    from app.studytypes.nextword.judges import StandInJudge

    if not demo_crowd_due(make_session, study_id):
        return None
    god = GodView(make_session, study_id)
    slots = god.open_slots()
    crowd = Crowd.parse(DEMO_CROWD, Heterogeneity(**DEMO_ACTIVITY))
    judge = StandInJudge.calibrated(god.study(), crowd, true_ebc=DEMO_TRUE_EBC, seed=seed)
    leave = min(DEMO_LEFT, slots // 2)
    return run_http_crowd(
        base_url, make_session, study_id, secret_key, crowd, judge, seed=seed,
        max_hits=slots - leave,
    )  # fmt: skip
