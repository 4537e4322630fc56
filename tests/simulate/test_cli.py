"""`ebc simulate STUDY` run as a user runs it (a subprocess), on both databases."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from app.db import build_engine, make_sessionmaker
from app.migrate import upgrade
from tests.hits.factory import make_study

EBC = str(Path(sys.executable).with_name("ebc"))


def ebc(db, *args):
    env = {**os.environ, "EBC_ENV": "test", "DATABASE_URL": db.url}
    return subprocess.run([EBC, *args], capture_output=True, text=True, env=env, timeout=120)


def test_simulate_a_study_built_by_build_hits(empty_db):
    engine = build_engine(empty_db.settings())
    with engine.begin() as conn:
        upgrade(conn)
    with make_sessionmaker(engine)() as session, session.begin():
        study = make_study(
            session, slug="sim", lengths=(10, 20), per_cell=40, overlap_share=0.1,
            reward_cents=50, platform_fee=0.2,
        )  # fmt: skip
        # The simulation reads the design: a bigger study than the built HITs.
        study.items_per_cell = 600
        study.per_annotator_cap = 20
    engine.dispose()
    args = ("simulate", "sim", "--replications", "20", "--b", "199", "--seed", "3")
    out = ebc(empty_db, *args, "--true-ebc", "1.1")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "SIMULATED crowd (sampler), 20 replications" in text
    assert "2 lengths x 120 HITs" in text and "cap 20 HITs per annotator" in text
    assert "true EB-C 1.1" in text and "rejects EB-C=1" in text
    rows = [line.split() for line in text.splitlines() if line.startswith("with exclusions")]
    assert [r[2] for r in rows] == ["10", "20"]
    assert all(float(r[3]) == 1.1 and 0.95 < float(r[4]) < 1.25 for r in rows)
    # 2 lengths x (108 HITs x 1 + 12 x 3) = 288 assignments at $0.50 and a 20% fee.
    assert "288 assignments x $0.50 x (1 + fee 0.2) = $172.80" in text
    again = ebc(empty_db, *args, "--true-ebc", "1.1").stdout
    assert again.splitlines()[:-1] == text.splitlines()[:-1]  # seeded (the timing aside)

    noisy = ebc(empty_db, *args, "--crowd", "oracle,noisy:0.3").stdout
    assert "SIMULATED crowd (oracle,noisy:0.3)" in noisy and "power" in noisy
    assert "(target EB-C 1.02)" in noisy

    bad = ebc(empty_db, "simulate", "sim", "--crowd", "lazy")
    assert bad.returncode == 1 and "unknown crowd behaviour 'lazy'" in bad.stderr
    bad = ebc(empty_db, "simulate", "sim", "--true-ebc", "1.5")
    assert bad.returncode == 1 and "a CGD is a share" in bad.stderr
    bad = ebc(empty_db, "simulate", "nope")
    assert bad.returncode == 1 and "no study 'nope'" in bad.stderr
