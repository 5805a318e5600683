"""One registry shape for everything Proctor finds by name: the arm, gripper
and camera drivers, the station profiles, the wire dialects and their other
faces (conformance checks, servers), the action-unit conventions, the runner's
frameworks and its sandbox limit backends.

A registry maps a name to what was registered under it (a class, an instance
or a factory: whatever the role keeps). Its built-in names are declared once,
each with the module that registers it; that module is imported on the first
``get`` of one of its names, so that asking for the simulated arm never
imports franky (a built-in registered where the registry is defined names no
module: None). Tests register toy entries at run time and ``unregister`` them;
built-in ones stay.

An unknown name raises the role's error (``error=``: the drivers and the
profiles raise ``ConfigError``, the rest ``ValueError``), naming the role and
every known name, so a typo in a config or a manifest reads as its fix.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(
        self,
        role: str,
        modules: Mapping[str, str | None] | None = None,
        *,
        error: type[Exception] = ValueError,
        missing_hint: str = "",
    ) -> None:
        # ``role``: what an entry is, as an error names it ("arm driver",
        # "dialect"); ``modules``: built-in name → the module that registers
        # it, in the order ``names`` lists them; ``missing_hint``: what to
        # install when a built-in module needs a library that is absent
        self.role = role
        self.modules: dict[str, str | None] = dict(modules or {})
        self.error = error
        self.missing_hint = missing_hint
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        self._entries[name] = entry
        return entry

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: the decorated class or function is the entry ``name``."""

        def decorate(entry: T) -> T:
            return self.add(name, entry)

        return decorate

    def register_instance(self, cls: type[T]) -> type[T]:
        """Class decorator: one instance of ``cls`` is the entry named by its
        ``name`` attribute."""
        entry = cls()
        self.add(str(getattr(entry, "name")), entry)  # noqa: B009 (T has no bound)
        return cls

    def unregister(self, name: str) -> None:
        """Forget an entry registered at run time (built-in ones stay)."""
        if name not in self.modules:
            self._entries.pop(name, None)

    def names(self) -> list[str]:
        """The built-in names in their declared order, then the run-time ones sorted."""
        return list(self.modules) + sorted(set(self._entries) - set(self.modules))

    def get(self, name: object) -> T:
        """The entry called ``name`` (a ``str`` or a ``StrEnum``), its module
        imported first if it is a built-in not registered yet."""
        key = str(name)
        if key not in self._entries:
            if key not in self.modules:
                raise self.error(f"{self.role} '{key}' is not one of {', '.join(self.names())}")
            module = self.modules[key]
            if module is not None:
                self._import(key, module)
            if key not in self._entries:
                raise self.error(f"{self.role} module {module} did not register '{key}'")
        return self._entries[key]

    def _import(self, key: str, module: str) -> None:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                raise self.error(
                    f"{self.role} '{key}' is not available in this installation "
                    f"({module} is missing)"
                ) from None
            hint = f" ({self.missing_hint})" if self.missing_hint else ""
            raise self.error(
                f"{self.role} '{key}' needs {exc.name}, which is not installed{hint}"
            ) from None

    # read like the dict some callers kept before: ``in``, ``[name]``, iteration
    def __contains__(self, name: object) -> bool:
        return str(name) in self.modules or str(name) in self._entries

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())
