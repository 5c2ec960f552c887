"""schemathesis hooks for FlowRank (loaded by the repo's schemathesis.toml).

One hook, for one thing JSON Schema cannot state: in draft 2020-12 (OpenAPI
3.1) ``2.0`` *is* an integer, so schemathesis sends whole floats where the
schema says ``integer``; the contract refuses them (docs/api.md §4: a float
is a 422 even when whole, and so are ``shards: 4.0`` or ``ttl_s: 900.0``).
The hook spells such values as integers again. The refusal of ``5.0`` itself
is tested in tests/gateway/test_validation.py and test_boards.py, not here.
"""

from __future__ import annotations

import schemathesis

_EXACT = 2**53  # past this a float no longer names one integer: leave it (the server refuses it either way)


def _ints(value):
    if isinstance(value, float) and value.is_integer() and -_EXACT <= value <= _EXACT:
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


@schemathesis.hook
def map_body(context, body):
    return _ints(body)
