"""FlowRank's engine, in layers; each imports only the ones before it (tests/test_layers.py):

* ``engine.core``: the pure ranking core (no asyncio, threads, clock, files, Ray or FastAPI);
* ``engine.log``: the durable log, snapshots, journal files and archives (files and fsync only);
* ``engine.router``: the registry and its one fold, pure decisions, ingest, reads, board lifecycle, the API;
* ``engine.runtime``: how it runs (in process, engine host, remote gateway, read replica) and recovery;
* ``engine.cluster``: the Ray shell, the only package that imports Ray.
"""
