"""The operator console: the page for the person at the robot (``/console``).

How it reaches the station: through this web server, never from the browser
directly. The station daemon's local API binds to loopback and has no
accounts of its own (only the host's key), so the web server — which knows who is signed in —
stands in front of it: every console route needs the ``operator`` role, and
the server relays to ``settings.web.station_url`` (validated to be a
loopback ``http://`` origin) over HTTP and WebSocket, every call carrying
the host's station key (``settings.station_key_file``, the 0600 file the
daemon makes; the daemon answers nothing without it, nor anything that
carries an ``Origin``: ``proctor/station/api_guard.py``). The browser therefore
talks to one origin only, which the Content-Security-Policy
(``connect-src 'self'``) requires anyway, and the station never has to
answer anything but loopback.

Blinding: the console relays a *whitelist* of the station's status
(``proctor/web/console/view.py``), so a field the station might grow later does not
reach the operator until someone adds it here on purpose. The console never
reads who ran what (``tests/scheduler/test_blinding_structure.py`` walks this
package), and ``tests/web/test_console_blinding.py`` searches everything it
and the station API send during a campaign rollout for the policies' names,
owners, endpoints and checkpoint hashes.

Modules: ``view`` (what the operator may see, as pydantic models),
``station`` (the relay to the station's API), ``photos`` (reference photos
of initial scenes), ``routes`` (the page, the JSON API under
``/api/console``, the two WebSocket relays).
"""
