"""The study types: one plug-in per ``StudyType`` (see ``app.studytypes.base`` for what a type
provides). Code outside the types' packages asks this mapping, never a type's name:
``STUDY_TYPES[study.study_type]``, or :func:`study_type_of`.

A new type is one package under ``app/studytypes/`` and one line here (with its value of
``app.models.StudyType``).
"""

from __future__ import annotations

from typing import Any

from app.models import StudyType
from app.studytypes.base import StudyTypePlugin
from app.studytypes.nextword.plugin import NEXTWORD
from app.studytypes.ratings.plugin import RATINGS

STUDY_TYPES: dict[StudyType, StudyTypePlugin] = {
    StudyType.nextword: NEXTWORD,
    StudyType.ratings: RATINGS,
}


def study_type_of(study: Any) -> StudyTypePlugin:
    """The plug-in of `study`'s type (anything with a ``study_type``: a study, its row)."""
    return STUDY_TYPES[study.study_type]


__all__ = ["STUDY_TYPES", "study_type_of"]
