"""The router: the registry and its one fold (registry), pure decisions (decide),
ingest sequencing (ingest), reads (reads), board lifecycle (control), the engine's
one API (api) and the Router that holds them (router)."""
