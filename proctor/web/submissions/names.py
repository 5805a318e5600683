"""When two policy names are the same name to a reader.

The leaderboard, the pages and the export name policies, so two names a
reader could take for one another must not both exist: ``steady`` beside
``Steady``, ``ste ady``, ``st.eady`` or ``st_eady``; ``p0l1cy`` beside
``policy``. ``name_key`` is what uniqueness is judged on: the name in Unicode
compatibility form (NFKC: full-width and ligature forms become plain
letters), case-folded, with everything that is not a letter or digit
dropped (spaces and punctuation), and the ASCII look-alikes ``0``/``o`` and
``1``/``l``/``i`` read as one. Names may only be ASCII today
(``proctor/runner/manifest.py``), so NFKC is a guard for the day they are
not, not something a submitter can reach yet.

The key is computed when a name is registered, against every policy's name
(a few hundred rows): there is no column for it, because sites upgraded
from before it may hold look-alikes already, which an index could not
accept. Two look-alikes registered in the same instant on PostgreSQL could
both pass; the exact name stays unique in the database.
"""

from __future__ import annotations

import unicodedata

# characters read as one another in a name (after case folding)
_LOOK_ALIKES = str.maketrans({"0": "o", "1": "l", "i": "l"})


def name_key(name: str) -> str:
    """What a name is the same as: two names with one key are one name to a reader."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    return "".join(c for c in folded if c.isalnum()).translate(_LOOK_ALIKES)


def same_name(name: str, other: str) -> bool:
    """Whether a reader could take ``other`` for ``name`` (or it is ``name``)."""
    return name_key(name) == name_key(other)
