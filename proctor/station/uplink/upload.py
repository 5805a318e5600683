"""Sending an artifact's parts, as the server's upload plan says.

The station's client begins an upload (``POST /uploads``, an ``UploadPlan``),
calls ``send_parts`` and completes it (``POST /uploads/{id}/complete``) with
the list it returns. Resuming is the same three steps: the plan then lists
only the parts the store does not hold yet, and those already there come
back with their ETags from ``plan.received_etags``, so nothing is sent
twice.

A part's target says how to send it: ``auth="store"`` is a presigned URL of
the store, sent as is with no credentials at all (an ``Authorization``
header, even one the client carries by default, is removed: the station's
token is the server's business, never the store's); ``auth="server"`` is
this server's own part route, sent with ``server_headers`` (the station's
bearer token).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from proctor.core.errors import ProctorError
from proctor.core.station_api_wire import PartDone, PartTarget, UploadPlan


class PartRefused(ProctorError):
    """A part's target answered without an ETag (not an upload endpoint)."""


def send_parts(
    client: httpx.Client,
    plan: UploadPlan,
    path: Path,
    *,
    server_headers: dict[str, str],
    progress: Callable[[int], None] | None = None,
) -> list[PartDone]:
    """PUT each part ``plan.parts`` lists, read from ``path`` in
    ``plan.part_size`` slices; returns every part of the upload (those sent
    now and ``plan.received_etags``), in order, for the completion.

    ``progress`` is called with each part's byte count once the part is in.
    A refused part raises ``httpx.HTTPStatusError`` and a lost connection
    ``httpx.TransportError``; the parts sent before it are kept by the store,
    so asking for the plan again (``GET /uploads/{id}``) and calling this
    once more sends only the rest."""
    etags = dict(plan.received_etags)
    with Path(path).open("rb") as f:
        for target in sorted(plan.parts, key=lambda t: t.number):
            f.seek((target.number - 1) * plan.part_size)
            data = f.read(plan.part_size)
            etags[target.number] = _send(client, target, data, server_headers)
            if progress is not None:
                progress(len(data))
    return [PartDone(number=n, etag=etags[n]) for n in sorted(etags)]


def _send(
    client: httpx.Client, target: PartTarget, data: bytes, server_headers: dict[str, str]
) -> str:
    headers = dict(target.headers)
    if target.auth == "server":
        headers.update(server_headers)
    request = client.build_request("PUT", target.url, content=data, headers=headers)
    if target.auth == "store":
        request.headers.pop("authorization", None)
    response = client.send(request)
    response.raise_for_status()
    etag = response.headers.get("etag")
    if not etag:
        raise PartRefused(f"part {target.number}: {target.url.split('?')[0]} gave no ETag")
    return etag.strip('"')
