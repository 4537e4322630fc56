"""Items record the software that made them; the results' manifest shows it."""

from __future__ import annotations

import torch
import transformers

from app.models import Item
from app.results.catalog import manifest
from app.software import software
from tests.factories import StudyFactory
from worker.prefixes import PrefixItem, PrefixSpec
from worker.runner import item_row


def test_items_record_the_software_and_the_manifest_shows_it(session):
    f = StudyFactory(session, "sw")
    for index, kind in enumerate(("data", "model")):
        made = PrefixItem(length=10, kind=kind, index=index, words=["w"] * 10, choices=[("a", 1.0)])
        session.add(Item(study_id=f.study.id, **item_row(made, attention=False, spec=PrefixSpec())))
    session.flush()
    m = manifest(session, f.study)
    assert [s.model_dump() for s in m.precompute_software] == [software()]
    worker = m.precompute_software[0].packages
    assert (
        worker["torch"] == torch.__version__ and worker["transformers"] == transformers.__version__
    )
    assert m.software.python and m.software.packages["numpy"]
    assert m.item_provenance["model"]["software"] == software()
