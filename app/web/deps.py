"""The request's unit of work as a FastAPI dependency (kept out of `app.db`, which the
worker imports and which must not load FastAPI)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path, Request
from sqlalchemy.orm import Session

from app.db import unit_of_work
from app.validation import INT32_MAX


def get_session(request: Request) -> Iterator[Session]:
    """One session per request; the request commits, services only flush.

    Used with `scope="function"` so the commit happens before the response is
    sent: a client never sees a success that was not stored.
    """
    with unit_of_work(request.app.state.sessionmaker) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session, scope="function")]

# A row id in a URL: an INTEGER primary key, so anything past it names no row.
RowId = Annotated[int, Path(ge=1, le=INT32_MAX)]
