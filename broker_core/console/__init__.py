"""``rmq console``: a web console over the brokers, a client like any other.

It talks to the brokers only through :class:`broker_core.client.RocketMQClient` (the
admin service and the messaging RPCs), so it adds nothing to a broker's hot path.

Modules, one concept each:

==============  ==========================================================================
targets.py      which broker groups there are and a single-broker client of each
views.py        what the pages show, as plain JSON-able dicts (one function per page)
messages.py     finding messages (key, id, store time), browsing a queue, showing bodies
actions.py      what the pages change: topics, test sends, offset resets, resends
sessions.py     logins (access key + secret key kept in this process's memory only),
                the signed session cookie's id and the CSRF token of each session
reads.py        page path → the function giving its dict (the page and ``/api`` + path)
writes.py       (method, ``/api`` path) → the write action it runs
app.py          the Starlette application: HTML pages, the JSON API (its table), errors
server.py       uvicorn on a socket bound first; ``start_console`` runs it on a thread
==============  ==========================================================================

``rmq console`` is ``broker_core/cli_console.py``; the web libraries load only there.
"""
