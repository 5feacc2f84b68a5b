"""Planning: compare the project (desired) with the world (actual) and produce a Plan.

Modules, in the order data flows through them:
- `world`: reading actual state (catalog, registry, Kafka) into a `WorldState` value (I/O);
- `desired`: the project's tables as the specs the builder and the engine need (pure);
- `capabilities`: the single "not supported yet" gate;
- `builder`: desired vs actual -> `Plan` (pure, no I/O);
- `actions`, `plan`: the immutable plan value (typed actions, fingerprints, the DAG);
- `render_human`, `render_json`, `render_markdown`: presentations of a plan;
- `plan_file`: saving/loading a plan and checking it is not stale.
"""
