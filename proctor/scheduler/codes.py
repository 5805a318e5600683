"""Opaque identifiers handed to the station: run codes and endpoint handles.

Both come from ``secrets``, never from the allocation seed or a counter, so
they carry no information about the policy, the order, or each other.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable

# no 0/O, 1/I/L or U: a code is read aloud and typed by the operator
RUN_CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTVWXYZ"
RUN_CODE_LENGTH = 4  # 30**4 = 810,000 codes; collisions are retried
RUN_CODE_RE = re.compile(rf"^R-[{RUN_CODE_ALPHABET}]{{{RUN_CODE_LENGTH},8}}$")

# 24 random bytes = 192 bits: a capability, unguessable, URL-safe base64 (32 characters)
HANDLE_BYTES = 24
HANDLE_RE = re.compile(r"^[A-Za-z0-9_-]{32}$")


def new_run_code(length: int = RUN_CODE_LENGTH) -> str:
    return "R-" + "".join(secrets.choice(RUN_CODE_ALPHABET) for _ in range(length))


def new_endpoint_handle() -> str:
    return secrets.token_urlsafe(HANDLE_BYTES)


def is_run_code(text: str) -> bool:
    return RUN_CODE_RE.fullmatch(text) is not None


def is_endpoint_handle(text: str) -> bool:
    return HANDLE_RE.fullmatch(text) is not None


def code_length_for(total: int) -> int:
    """The shortest code length whose space stays at most half used with
    ``total`` codes issued, so drawing never degenerates into endless retries."""
    length = RUN_CODE_LENGTH
    while total > len(RUN_CODE_ALPHABET) ** length // 2:
        length += 1
    return length


def unique_codes(
    count: int, *, already_issued: int, taken: Callable[[set[str]], set[str]]
) -> list[str]:
    """``count`` distinct fresh run codes; ``taken(candidates)`` says which of
    the candidates are already in use (a database lookup)."""
    length = code_length_for(already_issued + count)
    chosen: set[str] = set()
    while len(chosen) < count:
        candidates = set()
        while len(candidates) < count - len(chosen):
            code = new_run_code(length)
            if code not in chosen:
                candidates.add(code)
        chosen |= candidates - taken(candidates)
    codes = list(chosen)
    secrets.SystemRandom().shuffle(codes)
    return codes
