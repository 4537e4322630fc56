"""REST API, /api/v1. Every route but /version needs a bearer token."""

from fastapi import APIRouter
from pydantic import BaseModel

from app import __version__
from app.web import api_results
from app.web.security import ApiUserDep

router = APIRouter(prefix="/api/v1", tags=["api"])


class VersionOut(BaseModel):
    service: str
    version: str


class MeOut(BaseModel):
    username: str
    is_admin: bool


@router.get("/version", response_model=VersionOut, summary="Service version (public)")
def version() -> VersionOut:
    return VersionOut(service="ebc-judge", version=__version__)


@router.get(
    "/me",
    response_model=MeOut,
    responses={k: api_results.ERRORS[k] for k in (401, 403, 503)},
    summary="The user the token belongs to",
)
def me(user: ApiUserDep) -> MeOut:
    return MeOut(username=user.username, is_admin=user.is_admin)


# Studies and results (their own module: app/web/api_results.py).
router.include_router(api_results.router)
