"""FlowRank's HTTP gateway: a FastAPI shell over :class:`engine.router.api.EngineClient`.

Public API: :func:`gateway.app.create_app`, :class:`gateway.settings.Settings`,
:class:`gateway.client.FlowRankClient`, ``gateway.cli.main`` (``flowrank serve``).
"""
