"""The catalog adapter: where does a claimed table live?

* :mod:`.iceberg_rest` — the Iceberg REST and Amoro resolvers (``LoadTable``), and path systems (s3, hdfs);
* :mod:`.http` — their HTTP machinery: authentication, TLS, retries with backoff, the circuit breaker;
* :mod:`.registry` — ``tether.catalogs`` entry points and the live resolver per configured system;
* :mod:`.executor` — serves ``LookupDataLocation`` commands, answering with lookup events.
"""
