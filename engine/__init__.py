"""FlowRank's engine: the pure ranking core plus its log and cluster shells.

The modules directly in this package import neither Ray nor FastAPI and
never read the clock: ``engine.log`` adds files, ``engine.cluster`` adds Ray.
"""
