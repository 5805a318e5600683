"""What a dialect's conformance face is: the checks only its wire needs,
which ``proctor policy check`` and the web's submission checks ask it.

One ``DialectChecks`` per dialect, registered under the dialect's own name
(``proctor.policywire.conformance.dialects``); the dialect's client face
(``proctor.policywire.dialects``) never imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from proctor.policywire import dialects
from proctor.policywire.dialects.base import Dialect

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

    from proctor.policywire.conformance.state import CheckState
    from proctor.policywire.wire.spec import ServerInfo


class DialectChecks:
    name: ClassVar[str]

    @property
    def dialect(self) -> Dialect:
        """The client face registered under the same name."""
        return dialects.get(self.name)

    # how the report names the wire ("the openpi dialect") and one handshake-to-close
    # exchange on it ("connection")
    wire_text: ClassVar[str] = "dialect"
    session_text: ClassVar[str] = "connection"
    # how the key is sent, for a server that refused the handshake with 401 or 403
    auth_hint: ClassVar[str] = "'Authorization: Api-Key <key>'"
    # what a 404 at the handshake suggests ("" : nothing)
    not_found_hint: ClassVar[str] = ""
    # the metadata keys the station reads, for the identity finding
    metadata_keys_text: ClassVar[str] = "nothing"
    # the message that resets a server mid-session, as findings name it (None: none)
    reset_name: ClassVar[str | None] = None

    def structural_metadata(self, path: str) -> bool:
        """Whether a metadata path is protocol the dialect declares (never identity)."""
        return False

    def check_url(self, check: CheckState) -> bool:
        """Whether the URL is one the dialect can dial (a failed finding if not)."""
        return True

    def check_ready(self, check: CheckState) -> bool:
        """Before the handshake: wait until the server says it is ready, where the
        dialect has a readiness call (False: a failed finding says why)."""
        return True

    def check_handshake(self, check: CheckState, ws: ClientConnection) -> bool:
        """The handshake on a raw connection, judged; True: the metadata was usable."""
        raise NotImplementedError

    def check_metadata(self, check: CheckState, metadata: dict[Any, Any], info: ServerInfo) -> None:
        """The findings on usable metadata (what it says, identity, action space)."""
        raise NotImplementedError

    def check_extras(self, check: CheckState) -> None:
        """Checks only this dialect has, after a successful handshake."""

    def check_reset(self, check: CheckState, first: list[np.ndarray]) -> None:
        """After the second run of the observations: the reset finding."""
        from proctor.policywire.conformance.state import Status

        wire, what = self.wire_text, self.session_text
        check.add(
            "reset",
            "Reset",
            Status.passed,
            f"The {wire} has no reset message: the station opens a new {what} "
            f"for every episode, and your server served a second {what}.",
        )

    def check_error_convention(self, check: CheckState, ws: ClientConnection) -> None:
        """A fresh raw connection (closed by the caller): how errors are reported."""
        raise NotImplementedError

    def reply_error_text(self, raw: Any) -> str | None:
        """The server's own error text in a refused reply, for its submitter's report."""
        return None

    def explain_reply(self, check: CheckState, raw: Any, station_says: str, n: str) -> str:
        """Advice for a reply the station's client refused."""
        return f"The station's client refused your reply to observation {n}: {station_says}."

    def reply_notes(self, reply: Any, str_keys: bool) -> dict[str, Any]:
        """What ``judge_replies`` needs to know of one accepted reply."""
        return {"str_keys": str_keys}

    def judge_replies(self, check: CheckState, chunks: list[np.ndarray]) -> None:
        """The findings on the replies of one run of the observations."""
        raise NotImplementedError
