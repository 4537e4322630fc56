"""The dashboard's study form takes its fields from the study file's settings."""

from __future__ import annotations

from sqlalchemy import select

from app.models import Study
from app.studies.forms import FIELDS, OPTIONAL_KINDS, form_values
from app.studies.schemas import SETTINGS, STUDY_KINDS, ChannelSection
from app.studies.service import config_of
from tests.studies.test_mapping import FULL


def test_the_form_has_an_input_for_every_setting_but_the_channels(logged_in):
    assert set(FIELDS) == {n for n in SETTINGS if not n.startswith("channels.")}
    page = logged_in.get("/dashboard/studies/new").text
    missing = [name for name in FIELDS if f'name="{name}"' not in page]
    assert missing == []


def test_every_setting_the_form_shows_comes_back_from_the_study_it_makes(logged_in, session):
    values = form_values(FULL)
    checked = [k for k in FULL.kinds if k in (*STUDY_KINDS, *OPTIONAL_KINDS)]
    extra = " ".join(k for k in FULL.kinds if k not in checked)
    r = logged_in.post(
        "/dashboard/studies",
        data={"csrf_token": logged_in.csrf, **values, "kinds": checked, "kinds_extra": extra},
        files={"dataset_file": ("", b"")},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    study = session.scalar(select(Study).where(Study.slug == FULL.slug))
    # A form-made study is invite-only: the crowd channels are opened in a study file.
    assert config_of(study) == FULL.model_copy(update={"channels": ChannelSection()})
    assert logged_in.get(f"/dashboard/studies/{FULL.slug}").context["config"] == values
