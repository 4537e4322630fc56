"""The embedded demo: a study and an admin account on the default SQLite file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.service import create_user, generate_password, set_password
from app.models import Study, User
from app.studies.schemas import DatasetSection, ModelSection, StudyConfig
from app.studies.service import create_study, get_study

DEMO_SLUG = "demo-austen"
DEMO_USER = "admin"


@dataclass(frozen=True)
class SeededDemo:
    study: Study
    username: str
    password: str


def demo_config(model_dir: Path, dataset: Path, *, items_per_cell: int = 40) -> StudyConfig:
    return StudyConfig(
        slug=DEMO_SLUG,
        title="Demo: a small word-level LM on Jane Austen",
        description="Two prefix lengths, data and model prefixes, small counts.",
        model=ModelSection(name=str(model_dir)),
        dataset=DatasetSection(path=str(dataset)),
        prefix_lengths=[10, 20],
        kinds=["data", "model"],
        items_per_cell=items_per_cell,
        seed=20261122,
        annotators={"min_seconds_per_item": 0.5},
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
