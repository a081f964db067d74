"""Security core, sans-IO (reference security.md): ACLs and the authorize function, SASL mechanisms and
the per-connection SASL state machine, JAAS parsing, SCRAM credentials, DN -> principal mapping."""
