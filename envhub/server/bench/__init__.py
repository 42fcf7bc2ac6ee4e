"""The serving benchmark (:mod:`.serving`, ``envhub bench serve``) and its lean WebSocket load
generator (:mod:`.loadgen`, also used by the load tests)."""
