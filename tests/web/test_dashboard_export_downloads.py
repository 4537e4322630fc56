"""The dashboard's streamed downloads: whole files, and a loud failure (see also
tests/web/test_export_downloads.py for the API and a real server)."""

from __future__ import annotations

import pytest

from app.results.downloads import SPECS
from tests.factories import answered_study, broken_study

STREAMED = ["judgments.csv", "judgments.jsonl", "items.csv", "items.jsonl"]


def test_streamed_downloads_of_a_study_built_by_build_hits(logged_in, session):
    study = answered_study(session)
    session.commit()
    for name in STREAMED:
        r = logged_in.get(f"/dashboard/studies/rt/results/{name}")
        assert r.status_code == 200, name
        assert r.text == "".join(SPECS[name].chunks(session, study))


@pytest.mark.parametrize("name", STREAMED)
def test_a_download_that_fails_before_its_first_byte_is_an_error_page(logged_in, session, name):
    broken_study(session, last=False)
    session.commit()
    r = logged_in.get(f"/dashboard/studies/broken/results/{name}")
    assert r.status_code == 500 and r.template.name == "error.html"
    assert "content-disposition" not in r.headers
    assert "nothing was sent" in r.text
