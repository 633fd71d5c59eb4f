"""The local API (docs/api.md): HTTP/JSON on a Unix socket, for healerctl and monitoring.

`server` handles HTTP and runs `ApiServer` on the `sockets`; `routes` says what each
endpoint reads or changes, `views` the JSON shapes, `describe` and `logs` what an
operator asks after a failure; `access` who is asking and what they may do, `limits`
how many connections each caller may hold. This file imports nothing, so that a module
that needs only `views` (the metrics) does not load the server.
"""
