"""The self-recovery figures (app.studytypes.nextword.recovery, issue 34) on a study built as
production builds it, with gap and corrupted kinds and a reference model: EB-C_gap against
l_gap from people (the cells' judgments) and from the reference model, CGD against the
corruption rate beside CGD(M|D) and CGD(M|M); CSV, LaTeX, plot; the API and its audit."""

from __future__ import annotations

import csv
import io
import math

import pytest
from sqlalchemy import select

from app.auth.service import create_api_token
from app.models import AuditEvent, User
from app.results.schemas import ResultQuery
from app.studytypes.nextword.diagnostics import study_diagnostics
from app.studytypes.nextword.recovery import (
    RECOVERY_FIELDS,
    recovery_csv,
    recovery_from,
    recovery_latex,
    recovery_plot,
    study_recovery,
)
from tests.results.diagnostic_study import cell_means, diagnostic_study, reference_means

FAST = ResultQuery(b=200, seed=2)
GAP, CGAP = "data_shuffled+gap@5", "data_corrupted@0.5+gap@5"
KINDS = ("data", "model", "data_corrupted@0.5", "data_corrupted@1", GAP, CGAP)


@pytest.fixture
def study(session):
    made = diagnostic_study(session, "rec", kinds=KINDS, reference="fake:3", annotators=4)
    session.commit()
    return made


def test_recovery_curves_are_the_diagnostics_cells(session, study):
    rec = study_recovery(session, study, FAST)
    people = {(p.kind, p.length): p for p in rec.gap_curve if p.source == "people"}
    means = cell_means(session, study)
    # EB-C_gap at l = 5 is over data at 10; at l = 10 there is no data cell at 15.
    for kind in (GAP, CGAP):
        p = people[(kind, 5)]
        assert (p.l_gap, p.reference_length) == (5, 10)
        assert p.ebc_gap == pytest.approx(means[(5, kind)] / means[(10, "data")])
        assert p.distorted_kind == kind.partition("+")[0] and 0 <= p.p_value <= 1
        assert math.isnan(people[(kind, 10)].ebc_gap)
    assert people[(CGAP, 5)].c == 0.5 and people[(GAP, 5)].c is None
    want = reference_means(session, study)
    js = {p.kind: p for p in rec.gap_curve if p.source == "synthetic:js" and p.length == 5}
    assert js[GAP].ebc_gap == pytest.approx(want[(5, GAP, "js")] / want[(10, "data", "js")])
    # CGD against c: the corrupted kinds (not the corrupted gap kind) beside data and model.
    points = [q for q in rec.corruption_curve if q.source == "people"]
    assert {(q.c, q.length) for q in points} == {(0.5, 5), (1.0, 5), (0.5, 10), (1.0, 10)}
    for q in points:
        assert q.corrupts == "data" and q.cgd == pytest.approx(means[(q.length, q.kind)])
        assert q.cgd_data == pytest.approx(means[(q.length, "data")])
        assert q.cgd_model == pytest.approx(means[(q.length, "model")])
    assert "people" in rec.intervals and "synthetic:js" in rec.intervals
    assert rec.reference_values == [] and "not drawn" in rec.reference_note
    # The diagnostics rows name the ratio each kind has.
    diag = study_diagnostics(session, study, FAST)
    names = {r.kind: r.ratio_name for r in diag.rows if r.source == "people"}
    assert names == {
        "data": None,
        "model": None,
        "data_corrupted@0.5": "corruption_ratio",
        "data_corrupted@1": "corruption_ratio",
        GAP: "ebc_gap",
        CGAP: "ebc_gap",
    }
    assert recovery_from(diag) == rec


@pytest.mark.sqlite
def test_recovery_writers(session, study):
    rec = study_recovery(session, study, FAST)
    rows = list(csv.DictReader(io.StringIO(recovery_csv(rec))))
    assert list(rows[0]) == RECOVERY_FIELDS
    assert len(rows) == len(rec.gap_curve) + len(rec.corruption_curve)
    assert {r["curve"] for r in rows} == {"ebc_gap", "cgd_by_c"}
    tex = recovery_latex(rec)
    assert tex.count("\\begin{tabular}") == 2 and "EB-C$_{gap}$" in tex
    assert "data\\_shuffled" in tex and "data_shuffled" not in tex.replace("data\\_", "")
    assert recovery_plot(rec, "svg").lstrip().startswith(b"<?xml")
    assert recovery_plot(rec, "png").startswith(b"\x89PNG")


@pytest.mark.sqlite
def test_a_study_without_gap_or_corrupted_kinds_says_so(session):
    plain = diagnostic_study(session, "plainrec", kinds=("data", "model", "random"), annotators=2)
    rec = study_recovery(session, plain, FAST)
    assert rec.gap_curve == [] and rec.corruption_curve == []
    assert any("no EB-C_gap" in m for m in rec.messages)
    assert recovery_plot(rec, "svg").lstrip().startswith(b"<?xml")  # empty panels, not an error


@pytest.mark.sqlite
def test_recovery_api_and_downloads_are_audited(client, session, study):
    user = User(username="ada", password_hash="unused", is_admin=True)
    session.add(user)
    session.flush()
    auth = {"Authorization": f"Bearer {create_api_token(session, user, 'tests').secret}"}
    session.commit()
    base = "/api/v1/studies/rec/results/recovery"
    doc = client.get(f"{base}?b=200&seed=2", headers=auth).json()
    assert doc == study_recovery(session, study, FAST).model_dump(mode="json")
    for fmt, start in (("csv", b"study,curve"), ("tex", b"% ebc-judge"), ("png", b"\x89PNG")):
        r = client.get(f"{base}.{fmt}?b=200&seed=2", headers=auth)
        assert r.status_code == 200 and r.content.startswith(start), fmt
    assert client.get(f"{base}.pdf", headers=auth).status_code == 422
    assert client.get(f"{base}.csv").status_code == 401
    session.expire_all()
    what = session.scalars(
        select(AuditEvent).where(AuditEvent.study_id == study.id, AuditEvent.action == "export")
    ).all()
    assert [e.detail["what"] for e in what] == ["recovery.csv", "recovery.tex", "recovery.png"]
