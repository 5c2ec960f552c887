"""Shared route helpers: typed path parameters, the gateway state accessor."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from pydantic import AfterValidator

from gateway.guard import GuardedRoute
from gateway.schemas import _valid_id
from gateway.validation import BOARD_ID_PATTERN, CURSOR_PATTERN, ID_PATTERN

Ties = Annotated[
    Literal["competition"] | None,
    Query(description="`competition`: every entry (and a player view) also carries `tied_rank`, "
                      "the standard competition rank (1, 1, 3) by primary value."),
]
BoardIdPath = Annotated[
    str,
    Path(pattern=BOARD_ID_PATTERN, description="`game:mode:season:scope`.", examples=["arena-clash:solo:S7:global"]),
]
PlayerIdPath = Annotated[
    str,
    Path(min_length=1, max_length=128, description="1-128 Unicode characters, no control characters.",
         examples=["p-ava"], json_schema_extra={"pattern": ID_PATTERN}),
    AfterValidator(_valid_id),
]
EventIdPath = Annotated[
    str,
    Path(min_length=1, max_length=128, description="The held event's id.", examples=["evt-s7-late"],
         json_schema_extra={"pattern": ID_PATTERN}),
    AfterValidator(_valid_id),
]



def cursor_query(description: str):
    """A page cursor: ``<version>.<offset>`` (:data:`gateway.validation.CURSOR_PATTERN`), checked by
    :func:`gateway.validation.decode_cursor` (the lean path does not run FastAPI's validation)."""
    return Query(max_length=512, description=description, json_schema_extra={"pattern": CURSOR_PATTERN})


#: ``?cursor=``: the ``next_cursor`` of the previous page (top pages, awards)
PageCursor = Annotated[str | None, cursor_query("`next_cursor` of the previous page.")]


def page_limit(what: str):
    """``?limit=``: items per page, 1-1000 (:data:`gateway.hot.MAX_LIMIT`)."""
    return Query(ge=1, le=1000, description=f"{what} per page (1-1000).")


def json_bytes(body: bytes) -> Response:
    """An answer already encoded (orjson, :mod:`gateway.hot`)."""
    return Response(body, media_type="application/json")


def guarded_router(tag: str, public: bool = False) -> APIRouter:
    """Routes checked by :class:`GuardedRoute`. The bearer scheme is documented
    in OpenAPI by ``gateway.app`` rather than declared as a FastAPI dependency:
    the guard reads the header itself, and a dependency would be solved again
    on every request for nothing (~15 % of a cheap read's gateway time)."""
    return APIRouter(route_class=GuardedRoute, tags=[tag])


def gw(request: Request):
    """The :class:`gateway.app.Gateway` of this app."""
    return request.app.state.gateway
