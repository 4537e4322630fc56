"""Enumerations stored as strings (no native database enums: easier migrations)."""

from enum import StrEnum

from sqlalchemy import Enum


def str_enum(enum_cls: type[StrEnum]) -> Enum:
    return Enum(
        enum_cls,
        native_enum=False,
        length=32,
        validate_strings=True,
        values_callable=lambda cls: [m.value for m in cls],
    )


class Task(StrEnum):
    lm = "lm"
    seq2seq = "seq2seq"


class StudyType(StrEnum):
    """What people do in a study (docs/design.md §1 and "Second protocol")."""

    nextword = "nextword"  # pick the most plausible next word: CGD, EB-C
    ratings = "ratings"  # rate continuations for quality, then consistency: EB-M


class StudyStatus(StrEnum):
    draft = "draft"  # configured, nothing computed
    precomputing = "precomputing"
    ready = "ready"  # items made, HITs may be built
    collecting = "collecting"  # HITs open to annotators
    closed = "closed"


class SpecialTop1(StrEnum):
    """What to do when a special token (end of text, unknown) is the model's top-1."""

    skip = "skip"  # drop the prefix, make another
    renormalise = "renormalise"  # drop the token and renormalise the rest


class JobStatus(StrEnum):
    pending = "pending"
    running = "running"
    done = "done"
    failed = "failed"
    cancelled = "cancelled"


class ShardStatus(StrEnum):
    pending = "pending"
    leased = "leased"
    done = "done"
    failed = "failed"
    cancelled = "cancelled"


class Channel(StrEnum):
    """How an annotator came: each crowd platform's channel carries the platform's name
    (`app.crowd.registry`: one name per platform), and `batch` an imported file."""

    local = "local"  # signed invite link
    mturk = "mturk"  # Mechanical Turk ExternalQuestion
    # Prolific's entry link (`/p/{slug}`); "panel" before revision 0009 gave it one name.
    prolific = "prolific"
    # An imported MTurk-format results file (Turkle, MTurk's requester site): never a party
    # to our MTurk API calls (app.crowd.imports). A string column with no CHECK: no migration.
    batch = "batch"


class AssignmentStatus(StrEnum):
    leased = "leased"
    submitted = "submitted"
    returned = "returned"
    expired = "expired"


class ReviewStatus(StrEnum):
    """The crowd platform's side of a submitted assignment (approve, reject)."""

    pending = "pending"
    approved = "approved"
    rejected = "rejected"
    failed = "failed"  # the platform call failed; error kept on the row
