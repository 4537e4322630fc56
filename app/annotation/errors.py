"""The refusals of the annotator pages: every bad request is a clear 4xx that changes nothing."""

from __future__ import annotations


class AnnotationError(Exception):
    """A request an annotator page must refuse; `status_code` is a 4xx."""

    status_code = 400

    def __init__(
        self, message: str, status_code: int | None = None, *, retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if status_code is not None:
            self.status_code = status_code
        self.retry_after = retry_after  # seconds, sent as Retry-After (429, 503)


class FormRefused(AnnotationError):
    """A posted page the server will not store as it is (incomplete, a bad option, a rating
    off the scale or out of order): the page is shown again with the message, under this
    4xx. Each study type's refusals are of this kind."""


class InvalidAnswers(FormRefused):
    """The form is incomplete or holds an impossible option: show it again."""

    def __init__(self, message: str, answers: dict[int, int]) -> None:
        super().__init__(message, 400)
        self.answers = answers


def given_back(consequence: str) -> AnnotationError:
    """The refusal of a post to a HIT the annotator gave back (a 409), `consequence` saying
    what that means for the post, e.g. "its answers can no longer be sent"."""
    return AnnotationError(
        f"You gave this HIT back (\u201cSkip this HIT\u201d), so {consequence}. "
        "Nothing was saved; reload the page for your next HIT.",
        409,
    )
