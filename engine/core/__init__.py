"""The pure core: keys and policies, columns (the partition), dedup, admission,
seasons, changes, checksum, records. No asyncio, threads, clock, files, Ray or
FastAPI; tested directly. Nothing here imports engine.router.router, engine.runtime,
engine.log or engine.cluster."""
