"""Read-only tokens for browsers (docs/api.md §12): ``POST /v1/tokens``."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from engine.core.errors import NotLeader
from engine.core.timefmt import format_timestamp

from gateway.auth import Permission
from gateway.guard import access, principal_of
from gateway.routes.common import guarded_router, gw
from gateway.routes.ops import cluster_info
from gateway.schemas import TokenIn, TokenOut, error_responses

router = guarded_router("tokens")


@router.post("/v1/tokens", status_code=201, response_model=TokenOut, responses=error_responses(),
             summary="Mint a signed read-only token for some boards (any role)")
@access(Permission.READ, "write")
async def mint_token(body: TokenIn, request: Request):
    """The token reads what a `reader` may read (GET routes only), only on
    `board_ids` (null: every board), until `expires_at`, and is counted
    against the minting key's rate limit. A key revoked later takes its tokens
    with it. Tokens survive a restart (the signing secret is in the data
    directory)."""
    info = cluster_info(gw(request).engine)
    if info["role"] != "active":  # docs/api.md §19: a write, and tokens are writes, goes to the active node
        raise NotLeader("This node is a standby of its log: mint tokens on the active node.", leader=info["leader"])
    boards = None if body.board_ids is None else tuple(dict.fromkeys(body.board_ids))
    token, expires_ms = gw(request).credentials.mint(principal_of(request), boards, body.ttl_s)
    return JSONResponse({"token": token, "expires_at": format_timestamp(expires_ms),
                         "board_ids": None if boards is None else list(boards)}, status_code=201)
