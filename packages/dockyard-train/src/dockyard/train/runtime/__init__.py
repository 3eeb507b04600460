"""The Ray runtime: the cluster (:mod:`.cluster`), placement groups and fleets of actors
(:mod:`.placement`), the actor classes that host a backend (:mod:`.hosts`), the rollout collector
(:mod:`.collector`), the sandbox fleet (:mod:`.sandbox_fleet`) and the stack that starts them for
a run (:mod:`.stack`). Imported by the commands that train, never by ``import dockyard.train``."""
