"""Every table of the schema. Alembic migrations follow these models."""

from app.models.annotators import Annotator, Assignment, Judgment
from app.models.audit import AuditEvent
from app.models.base import Base, utcnow
from app.models.crowd import CrowdCall, CrowdHit, CrowdPosting
from app.models.enums import (
    AssignmentStatus,
    Channel,
    JobStatus,
    ReviewStatus,
    ShardStatus,
    SpecialTop1,
    StudyStatus,
    StudyType,
    Task,
)
from app.models.hits import Hit, HitPosition
from app.models.items import Item
from app.models.precompute import PrecomputeJob, PrecomputeShard
from app.models.ratings import Rating, StudyScore
from app.models.samples import ForcedSample
from app.models.studies import Study, StudyMember
from app.models.users import ApiToken, User

__all__ = [
    "Annotator",
    "ApiToken",
    "Assignment",
    "AssignmentStatus",
    "AuditEvent",
    "Base",
    "Channel",
    "CrowdCall",
    "CrowdHit",
    "CrowdPosting",
    "ForcedSample",
    "Hit",
    "HitPosition",
    "Item",
    "JobStatus",
    "Judgment",
    "PrecomputeJob",
    "PrecomputeShard",
    "Rating",
    "ReviewStatus",
    "ShardStatus",
    "SpecialTop1",
    "Study",
    "StudyMember",
    "StudyScore",
    "StudyStatus",
    "StudyType",
    "Task",
    "User",
    "utcnow",
]
