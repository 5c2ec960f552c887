"""How the engine runs: in this process (local), as the engine host (host), as a
gateway's forwarder (remote), as a read replica (replica); shard logic (shard) and
recovery (recovery) shared by all of them."""
