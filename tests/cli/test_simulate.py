"""`ebc simulate STUDY` on both databases: once as a user runs it (a subprocess), the other
runs in this process through typer's runner (the same command, without paying a fresh
interpreter's imports for each)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from app.db import build_engine, make_sessionmaker
from tests.hits.factory import make_study

EBC = str(Path(sys.executable).with_name("ebc"))


def ebc_process(db, *args):
    env = {**os.environ, "EBC_ENV": "test", "DATABASE_URL": db.url}
    return subprocess.run([EBC, *args], capture_output=True, text=True, env=env, timeout=120)


def ebc(db, *args):
    """The command in this process; the result as `subprocess.run` gives it."""
    from typer.testing import CliRunner

    from app.cli import cli

    out = CliRunner().invoke(cli, list(args), env={"EBC_ENV": "test", "DATABASE_URL": db.url})
    return SimpleNamespace(returncode=out.exit_code, stdout=out.stdout, stderr=out.stderr)


def test_simulate_a_study_built_by_build_hits(migrated_copy):
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as session, session.begin():
        study = make_study(
            session, slug="sim", lengths=(10, 20), per_cell=40, overlap_share=0.1,
            reward_cents=50, platform_fee=0.2,
        )  # fmt: skip
        # The simulation reads the design: a bigger study than the built HITs.
        study.items_per_cell = 600
        study.per_annotator_cap = 20
    engine.dispose()
    args = ("simulate", "sim", "--replications", "6", "--b", "199", "--seed", "3")
    out = ebc_process(migrated_copy, *args, "--true-ebc", "1.1")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "SIMULATED crowd (sampler), 6 replications" in text
    assert "2 lengths x 120 HITs" in text and "cap 20 HITs per annotator" in text
    assert "true EB-C 1.1" in text and "rejects EB-C = 1" in text
    rows = [line.split() for line in text.splitlines() if line.startswith("with exclusions")]
    assert [r[2] for r in rows] == ["10", "20"]
    assert all(float(r[3]) == 1.1 and 0.95 < float(r[4]) < 1.25 for r in rows)
    # 2 lengths x (108 HITs x 1 + 12 x 3) = 288 assignments at $0.50: MTurk's 20% (fewer
    # than 10 assignments per HIT), Prolific's 42.8% (the default rate), no fee for local.
    assert "mturk (sandbox), channel off: 288 assignments, rewards $144.00 + fees $28.80 = " \
        "$172.80" in text  # fmt: skip
    assert "prolific (production), channel off: 288 assignments, rewards $144.00 + fees " \
        "$61.63 = $205.63" in text  # fmt: skip
    assert "local (local): 288 assignments, rewards $144.00 + fees $0.00 = $144.00" in text
    one = next(line for line in text.splitlines() if line.startswith("one simulated study"))
    assert "l=10 " in one and "l=20 " in one and "(truth 1.1)" in one
    again = ebc(migrated_copy, *args, "--true-ebc", "1.1").stdout
    assert again.splitlines()[:-1] == text.splitlines()[:-1]  # seeded (the timing aside)

    noisy = ebc(migrated_copy, *args, "--crowd", "oracle,noisy:0.3").stdout
    assert "SIMULATED crowd (oracle,noisy:0.3)" in noisy and "power" in noisy
    assert "(target EB-C 1.02)" in noisy

    bad = ebc(migrated_copy, "simulate", "sim", "--crowd", "lazy")
    assert bad.returncode == 1 and "unknown crowd behaviour 'lazy'" in bad.stderr
    bad = ebc(migrated_copy, "simulate", "sim", "--true-ebc", "1.5")
    assert bad.returncode == 1 and "a CGD is a share" in bad.stderr
    bad = ebc(migrated_copy, "simulate", "nope")
    assert bad.returncode == 1 and "no study 'nope'" in bad.stderr
    bad = ebc(migrated_copy, "simulate", "sim", "--provider", "paypal")
    assert bad.returncode == 1 and "unknown provider 'paypal'" in bad.stderr
    bad = ebc(migrated_copy, "simulate", "sim", "--target-ebc", "0")
    assert bad.returncode == 1 and "--target_ebc: Input should be greater than 0" in bad.stderr


def test_simulate_prices_one_channel_with_its_own_rules(migrated_copy):
    """`--provider` picks one channel; MTurk's fee follows the study file (Masters: +5%) and
    the assignments per HIT (10 or more: 40%), each fee rounded half up per assignment."""
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as session, session.begin():
        study = make_study(session, slug="wide", lengths=(10,), per_cell=50, reward_cents=33)
        study.replicas = 10  # every HIT done by 10 annotators: MTurk's 40% tier
        study.overlap_share = 0.0
        study.channels = {"mturk": {"enabled": True, "sandbox": False, "masters": True}}
    engine.dispose()
    out = ebc(migrated_copy, "simulate", "wide", "--replications", "2", "--b", "199",
              "--provider", "mturk")  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    # 10 HITs x 10 replicas = 100 assignments; fee 45% of 33 cents = 14.85 -> 15 cents each.
    assert "mturk (production): 100 assignments, rewards $33.00 + fees $15.00 = $48.00" in (
        out.stdout
    )
    assert "10 or more assignments per HIT" in out.stdout and "Masters" in out.stdout
    assert "prolific" not in out.stdout and "local (local)" not in out.stdout
