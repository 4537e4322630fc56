"""The embedded demo: a study and an admin account on the default SQLite file."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.service import create_user, generate_password, set_password
from app.config import Settings
from app.models import User
from app.studies.schemas import DatasetSection, ModelSection, StudyConfig
from app.studies.service import create_study, get_study

DEMO_SLUG = "demo-austen"
DEMO_USER = "admin"


@dataclass(frozen=True)
class SeededDemo:
    study_slug: str
    username: str
    password: str


def demo_config(settings: Settings) -> StudyConfig:
    demo_dir = settings.data_dir / "demo"
    return StudyConfig(
        slug=DEMO_SLUG,
        title="Demo: a small word-level LM on Jane Austen",
        description="Two prefix lengths, data and model prefixes, small counts.",
        model=ModelSection(name=str(demo_dir / "model")),
        dataset=DatasetSection(path=str(demo_dir / "heldout.txt")),
        prefix_lengths=[10, 20],
        kinds=["data", "model"],
        items_per_cell=50,
        seed=20261122,
    )


def seed_demo(session: Session, settings: Settings) -> SeededDemo:
    """Create the demo study if missing and give the admin a fresh password.

    The password is new on every run so the console always shows one that works.
    """
    if get_study(session, DEMO_SLUG) is None:
        create_study(session, demo_config(settings))
    password = generate_password()
    user = session.scalar(select(User).where(User.username == DEMO_USER))
    if user is None:
        create_user(session, DEMO_USER, password, is_admin=True)
    else:
        set_password(session, user, password)
    return SeededDemo(DEMO_SLUG, DEMO_USER, password)
