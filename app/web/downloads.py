"""Streamed downloads (judgments, items) of the API and the dashboard, failing loudly.

A streamed body starts with the status line: once ``200`` is sent, a failure can only cut
the file short. So the first chunk (the first batch of rows) is made before the status line
is sent; a failure there is a ``500`` with no file. A later failure ends the file with an
error record (see ``app.results.exports``) and aborts the connection.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from fastapi import HTTPException, Request, status
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.types import Send

from app.db import unit_of_work
from app.models import Study

log = logging.getLogger(__name__)


class ExportResponse(StreamingResponse):
    """A `StreamingResponse` whose first chunk is made before its status line is sent."""

    def __init__(self, chunks: Iterator[str], *, media_type: str, filename: str) -> None:
        headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
        super().__init__(chunks, media_type=media_type, headers=headers)
        self._chunks = chunks

    async def stream_response(self, send: Send) -> None:
        try:
            first = await run_in_threadpool(next, self._chunks, None)
        except Exception as exc:
            log.exception("an export failed before its first byte")
            raise HTTPException(
                status.HTTP_500_INTERNAL_SERVER_ERROR,
                "The export failed before its first row, so nothing was sent; "
                "the server's log has the error.",
            ) from exc
        start = {"type": "http.response.start", "status": self.status_code}
        await send(start | {"headers": self.raw_headers})
        if first is not None:
            await self._send_body(send, first)
        async for chunk in self.body_iterator:
            await self._send_body(send, chunk)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_body(self, send: Send, chunk: str | bytes) -> None:
        body = chunk if isinstance(chunk, bytes) else chunk.encode(self.charset)
        await send({"type": "http.response.body", "body": body, "more_body": True})


def export_response(
    request: Request,
    study: Study,
    chunks: Callable[[Session, Study], Iterator[str]],
    *,
    media_type: str,
    filename: str,
) -> ExportResponse:
    """`chunks` of `study` as a download, read in a session of its own (the request's
    session is committed and closed before the body is made)."""
    make_session = request.app.state.sessionmaker
    study_id = study.id

    def body() -> Iterator[str]:
        with unit_of_work(make_session) as session:
            yield from chunks(session, session.get(Study, study_id))

    return ExportResponse(body(), media_type=media_type, filename=filename)
