"""Side-by-side benchmarks: offsetd against a peer broker (Tansu).

Entry point: ``bench/run.py`` (``make bench``). The modules:

* ``brokers``   - launchers that start/stop one broker process (free port, fresh data dir).
* ``procs``     - run client code in spawned child processes, with a deadline.
* ``clients``   - the client loops that run inside those children (confluent-kafka).
* ``workloads`` - the workload list: functions ``(bootstrap, broker_name) -> {key: Metric}``.
* ``offsets_log`` - a synthetic ``__consumer_offsets`` written to disk (for ``offsets-load``).
* ``abuse``     - issue 16's reliability workloads: garbage storm, idle connections, full disk.
* ``report``    - best-of-N aggregation, the comparison table and the JSON results file.
"""
