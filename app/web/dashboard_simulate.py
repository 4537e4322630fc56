"""Dashboard: "simulate before you pay" for a study (app.simulate.preview).

A GET form: the simulation changes nothing, so anyone who may view the study may run it,
and its answer can be bookmarked or shared. The handler is a plain `def`, so FastAPI runs
it in its thread pool and the event loop keeps serving; its work is bounded by the page's
limits (R <= 50, R x the estimated work of a replication <= 4 s, B = 2,000, and a 5 s
budget checked between replications), which spares a job queue, and at most
`MAX_RUNNING` run at once in a process (a 429 past them: the two cores are taken);
`ebc simulate` has no limit. Each study type's form and figures are its own (its plug-in's
`preview`: a next-word study's stand-in crowd, a ratings study's simulated raters), with
the same bounds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse

from app.simulate.costs import channel_costs
from app.simulate.preview import PAGE_LIMITS, PreviewError
from app.studytypes.registry import study_type_of
from app.web.pages import LOGIN, StudyDep, render

router = APIRouter(prefix="/dashboard/studies", include_in_schema=False, dependencies=LOGIN)

MAX_RUNNING = 2
BUSY = (
    f"{MAX_RUNNING} simulations are running on this server already. Try again in a few "
    "seconds, or run `ebc simulate STUDY`."
)
RETRY_AFTER_S = 5


class Slots:
    """At most `n` holders at once in this process; one more is refused, not queued."""

    def __init__(self, n: int) -> None:
        self._free = threading.BoundedSemaphore(n)

    @contextmanager
    def take(self) -> Iterator[bool]:
        """Yields whether a slot was free (and holds it until the block ends)."""
        got = self._free.acquire(blocking=False)
        try:
            yield got
        finally:
            if got:
                self._free.release()


RUNNING = Slots(MAX_RUNNING)


@router.get("/{slug}/simulate", response_class=HTMLResponse)
def simulate(request: Request, study: StudyDep) -> HTMLResponse:
    given = dict(request.query_params)
    preview = study_type_of(study).preview
    context = {"study": study, "sim_values": preview.form_values(given), "sim_limits": PAGE_LIMITS}
    try:
        options = preview.options_from_form(given, PAGE_LIMITS)
        with RUNNING.take() as free:
            if not free:
                response = render(
                    request,
                    "simulate.html",
                    {**context, "sim": None, "sim_errors": {"form": BUSY}},
                    status_code=status.HTTP_429_TOO_MANY_REQUESTS,
                )
                response.headers["Retry-After"] = str(RETRY_AFTER_S)
                return response
            settings = request.app.state.settings
            sim = preview.run(study, settings, options, limits=PAGE_LIMITS, price=channel_costs)
    except PreviewError as exc:
        return render(
            request,
            "simulate.html",
            {**context, "sim": None, "sim_errors": exc.errors},
            status_code=400,
        )
    return render(request, "simulate.html", {**context, "sim": sim, "sim_errors": {}})
