"""One APIRouter per resource; :func:`gateway.app.create_app` includes them all."""
